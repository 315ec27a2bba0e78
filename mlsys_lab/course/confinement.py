"""What a grading worker may touch: files (Landlock), system calls (seccomp), the network, its environment.

A worker runs a learner's code, so it is confined before that code can run, by the kernel, in ways the code
cannot undo (each layer holds even when the code turns off the worker's Python-level guards):

- **files**, Linux Landlock (unprivileged, as root too): read only the directories the interpreter imports
  from (``sys.path`` as it really is: a venv, conda, ``--user``, ``PYTHONPATH``, ``--target`` folders), the
  system's libraries and the few files of ``/etc`` that the C library and Jupyter read; the ``mlsys_lab``
  package *without* ``mlsys_lab/exercises`` (the checks' answers); read and write only the worker's own
  folder; read, write and ioctl the NVIDIA device files (a kernel exercise runs the learner's CUDA on the GPU).
  No file may be executed. On ABI 4 and newer, no TCP bind or connect; on ABI 6 and newer, no
  signal and no abstract socket outside the worker.
- **system calls**, a seccomp filter (x86-64): no new process (``fork``, ``vfork``, ``clone`` without
  ``CLONE_THREAD``; ``clone3`` answers ENOSYS so that threads fall back to ``clone``), no ``execve``; no
  socket but a Unix one before the first exercise and none at all from then on (:func:`close_sockets`); no
  signal to another process; no raising a resource limit; none of what root could use to leave the sandbox
  (``ptrace``, ``process_vm_*``, ``mount``, ``unshare``, ``setns``, module loading, ``bpf``, ``mknod``,
  ``open_by_handle_at``, ``io_uring``, keys, clocks).
- **the network**, a network namespace of its own where the kernel lets one be made (as root, or through an
  unprivileged user namespace): no interface but a loopback that is down.
- **the environment**, :func:`worker_environment`: what Python and the GPU need, nothing else (no tokens, no
  check seed).

:func:`mlsys_lab.course.protections.probe_protections` runs a small confined process that tries each thing a
worker must not do and reports which layers held; ``mlsys-lab grade --self-test`` prints it and
``--require-confinement`` refuses to grade without every layer.
"""

from __future__ import annotations

import ctypes
import os
import site
import struct
import sys

# ---------------------------------------------------------------- the environment

KEPT_VARIABLES = (
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE",
    "PYTHONUSERBASE", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH", "CUDA_PATH", "CUDA_HOME",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUPY_CACHE_DIR", "MLSYS_LAB_BACKEND", "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "MPLBACKEND", "MLSYS_LAB_WORKER_CONFINEMENT",
)
# ``off`` makes every layer stand down, as on a machine that offers none (macOS, an old kernel, a locked-down
# container): for testing how grading behaves there. The probe then reports each layer as not held.
SWITCH = "MLSYS_LAB_WORKER_CONFINEMENT"


def _switched_off() -> tuple[bool, str] | None:
    if os.environ.get(SWITCH, "on") == "off":
        return False, f"turned off ({SWITCH}=off)"
    return None


def worker_environment(extra: dict[str, str], base: dict[str, str] | None = None) -> dict[str, str]:
    """A worker's whole environment: :data:`KEPT_VARIABLES` that are set in ``base`` (this process's environment),
    the user site's base (so that a ``pip install --user`` is found without ``HOME``), and ``extra``. The worker
    sets ``HOME`` to its own folder."""
    base = os.environ if base is None else base
    env = {name: base[name] for name in KEPT_VARIABLES if name in base}
    if site.ENABLE_USER_SITE and "PYTHONUSERBASE" not in env:
        env["PYTHONUSERBASE"] = site.getuserbase()
    return {**env, **extra}


# ---------------------------------------------------------------- files: Landlock

_LANDLOCK_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
FS_READ, FS_ALL = (1 << 2) | (1 << 3), (1 << 16) - 1  # read files and folders; no execve
FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)
ABI_FS_BITS = {1: 13, 2: 14, 3: 15, 4: 15, 5: 16}
NET_TCP = 0b11  # LANDLOCK_ACCESS_NET_BIND_TCP | CONNECT_TCP (ABI 4)
SYSTEM_FOLDERS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/opt/conda")
# Of /etc, what the C library, Python, Jupyter and matplotlib read; not /etc/shadow, keys or tokens.
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/passwd",
             "/etc/group", "/etc/nsswitch.conf", "/etc/alternatives", "/etc/jupyter", "/etc/ipython",
             "/etc/matplotlibrc", "/etc/mime.types", "/etc/os-release", "/etc/fonts", "/etc/timezone")


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def import_folders() -> list[str]:
    """Every folder this interpreter imports from or loads libraries from, whatever the install looks like."""
    folders = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    folders |= {p for p in sys.path if p}
    folders |= {os.path.realpath(p) for p in list(folders)}  # a venv's lib64 link, a conda symlink
    return sorted(p for p in folders if os.path.isdir(p))


def installed_entries(folder: str) -> list[str]:
    """The entries of ``folder`` that installed distributions put there (their ``RECORD`` or ``top_level.txt``),
    with the ``.dist-info``/``.egg-info`` folders themselves: what a ``pip install --target`` folder holds, and
    nothing of a source checkout's (its notebooks, its tests, the solved lessons)."""
    names: set[str] = set()
    for entry in os.listdir(folder):
        meta = os.path.join(folder, entry)
        if entry.endswith(".dist-info") and os.path.isfile(os.path.join(meta, "RECORD")):
            with open(os.path.join(meta, "RECORD"), encoding="utf-8", errors="replace") as f:
                names |= {line.split(",", 1)[0].replace("\\", "/").split("/", 1)[0] for line in f if line.strip()}
            names.add(entry)
        elif entry.endswith(".egg-info"):
            top = os.path.join(meta, "top_level.txt")
            if os.path.isfile(top):
                with open(top, encoding="utf-8", errors="replace") as f:
                    names |= {line.strip() for line in f if line.strip()}
            names.add(entry)
    found = {name for name in names if name and not name.startswith("..") and name != "mlsys_lab"}
    found |= {f"{name}.py" for name in found} | {n for n in os.listdir(folder) if n.endswith(".pth")}
    return sorted(os.path.join(folder, name) for name in found if os.path.lexists(os.path.join(folder, name)))


def readable_paths(workdir: str) -> list[tuple[str, bool]]:
    """(path, writable) pairs the confined worker may use; everything else is out of reach.

    A folder on ``sys.path`` that holds ``mlsys_lab`` (a source checkout on ``PYTHONPATH``, a ``pip install
    --target`` folder) is opened only for what installed distributions put there (:func:`installed_entries`),
    so that its other packages are readable and neither ``mlsys_lab/exercises`` nor a checkout's solved
    notebooks and tests are.
    """
    import mlsys_lab

    package = os.path.realpath(os.path.dirname(mlsys_lab.__file__))
    parent = os.path.dirname(package)
    paths: list[tuple[str, bool]] = []
    for folder in import_folders():
        real = os.path.realpath(folder)
        if real == package or real.startswith(package + os.sep):
            continue
        if real == parent or package.startswith(real + os.sep):  # holds the course: installed entries only
            paths += [(entry, False) for entry in installed_entries(real) if not package.startswith(entry + os.sep)]
            continue
        paths.append((folder, False))
    paths += [(os.path.join(package, name), False) for name in sorted(os.listdir(package)) if name != "exercises"]
    paths += [(p, False) for p in (*SYSTEM_FOLDERS, *ETC_FILES)]
    paths += [(workdir, True), ("/dev/null", True), ("/dev/urandom", False), ("/dev/zero", False)]
    return [(p, w) for p, w in paths if os.path.lexists(p)]


# The NVIDIA driver's device files: CUDA opens more of them after start-up (a mapping of device memory, a new
# stream's channel), and drives the GPU through ioctl. Read, write and ioctl on these files only, nothing else.
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")
DEVICE_RIGHTS = (1 << 1) | (1 << 2) | (1 << 15)  # WRITE_FILE | READ_FILE | IOCTL_DEV (ABI 5)


def gpu_device_files() -> list[str]:
    """The NVIDIA device files of this machine (``/dev/nvidia0``, ``/dev/nvidiactl``, MIG's ``/dev/nvidia-caps/*``)."""
    import glob

    found = [p for p in GPU_DEVICE_FILES if os.path.exists(p)]
    found += sorted(glob.glob("/dev/nvidia[0-9]*")) + sorted(glob.glob("/dev/nvidia-caps/nvidia-cap*"))
    return [p for p in found if not os.path.isdir(p)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The Landlock ABI version this Linux kernel offers (0: none, or not Linux)."""
    numbers = _LANDLOCK_SYSCALLS.get(os.uname().machine)
    if numbers is None or not sys.platform.startswith("linux"):
        return 0
    return max(_libc().syscall(numbers[0], None, 0, 1), 0)


def landlock(workdir: str, extra_files: list[str]) -> tuple[bool, str]:
    """Confine this process (and its future threads) to :func:`readable_paths`: (held, what happened)."""
    if _switched_off():
        return _switched_off()
    numbers = _LANDLOCK_SYSCALLS.get(os.uname().machine)
    if numbers is None or not sys.platform.startswith("linux"):
        return False, f"no Landlock on {sys.platform}/{os.uname().machine}: files are not confined"
    create, add_rule, restrict = numbers
    libc = _libc()
    abi = landlock_abi()
    if abi < 1:
        return False, f"this kernel has no Landlock (errno {ctypes.get_errno()}): files are not confined"
    handled = FS_ALL & ((1 << ABI_FS_BITS.get(abi, 16)) - 1)
    net = NET_TCP if abi >= 4 else 0  # handled with no rule: every TCP bind and connect is refused
    scoped = 0b11 if abi >= 6 else 0  # abstract unix sockets and signals stay inside the domain
    attr = (ctypes.c_uint64 * 3)(handled, net, scoped)
    size = ctypes.sizeof(ctypes.c_uint64) * (3 if abi >= 6 else 2 if abi >= 4 else 1)
    ruleset = libc.syscall(create, ctypes.byref(attr), size, 0)
    if ruleset < 0:
        return False, f"Landlock ruleset refused (errno {ctypes.get_errno()}): files are not confined"
    gpu = [(f, DEVICE_RIGHTS) for f in gpu_device_files()]
    for path, writable in readable_paths(workdir) + [(f, False) for f in extra_files] + gpu:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        rights = (writable if type(writable) is int else handled if writable else FS_READ) & handled
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS
        rule = _PathBeneath(rights, fd)
        libc.syscall(add_rule, ruleset, 1, ctypes.byref(rule), 0)
        os.close(fd)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, required by landlock_restrict_self
    if libc.syscall(restrict, ruleset, 0) != 0:
        return False, f"landlock_restrict_self failed (errno {ctypes.get_errno()}): files are not confined"
    os.close(ruleset)
    extras = (", no TCP" if net else "") + (", signals and abstract sockets scoped" if scoped else "")
    extras += f", the GPU's {len(gpu)} device files" if gpu else ""
    return True, f"Landlock ABI {abi}: files confined to the worker's folder and the Python installation{extras}"


# ---------------------------------------------------------------- the network: a namespace of its own

CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000


def network_namespace() -> tuple[bool, str]:
    """Move this process into a new, empty network namespace (call before any thread starts)."""
    if _switched_off():
        return _switched_off()
    if not sys.platform.startswith("linux"):
        return False, f"no network namespaces on {sys.platform}"
    libc = _libc()
    if libc.unshare(CLONE_NEWNET) == 0:
        return True, "network namespace of its own (no interface up)"
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        return False, f"no network namespace (unshare refused, errno {ctypes.get_errno()})"
    try:  # keep our own uid and gid inside the user namespace, so that files look the same
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    except OSError as exc:
        return False, f"network namespace made, but the user map failed ({exc})"
    return True, "network namespace of its own, in a user namespace (no interface up)"


# ---------------------------------------------------------------- system calls: seccomp

AUDIT_ARCH_X86_64 = 0xC000003E
RET_ALLOW, RET_ERRNO, RET_KILL = 0x7FFF0000, 0x00050000, 0x80000000
EPERM, EACCES, ENOSYS = 1, 13, 38
CLONE_THREAD, AF_UNIX = 0x00010000, 1
# x86-64 system call numbers (arch/x86/entry/syscalls/syscall_64.tbl).
X86_64 = {
    "socket": 41, "connect": 42, "bind": 49, "socketpair": 53, "clone": 56, "fork": 57, "vfork": 58,
    "execve": 59, "kill": 62, "ptrace": 101, "syslog": 103, "setuid": 105, "setgid": 106, "setreuid": 113,
    "setregid": 114, "setgroups": 116, "setresuid": 117, "setresgid": 119, "rt_sigqueueinfo": 129,
    "mknod": 133, "personality": 135, "vhangup": 153, "pivot_root": 155, "adjtimex": 159, "setrlimit": 160,
    "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167,
    "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171, "iopl": 172, "ioperm": 173,
    "init_module": 175, "delete_module": 176, "quotactl": 179, "tkill": 200, "clock_settime": 227,
    "tgkill": 234, "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "mknodat": 259,
    "unshare": 272, "rt_tgsigqueueinfo": 297, "perf_event_open": 298, "fanotify_init": 300,
    "prlimit64": 302, "name_to_handle_at": 303, "open_by_handle_at": 304, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320,
    "bpf": 321, "execveat": 322, "userfaultfd": 323, "pidfd_send_signal": 424, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435, "pidfd_getfd": 438, "mount_setattr": 442,
}
REFUSED_SYSCALLS = (
    "fork", "vfork", "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "syslog",
    "setuid", "setgid", "setreuid", "setregid", "setgroups", "setresuid", "setresgid", "mknod", "mknodat",
    "personality", "vhangup", "pivot_root", "adjtimex", "setrlimit", "chroot", "acct", "settimeofday",
    "mount", "umount2", "swapon", "swapoff", "reboot", "sethostname", "setdomainname", "iopl", "ioperm",
    "init_module", "finit_module", "delete_module", "quotactl", "tkill", "clock_settime", "kexec_load",
    "kexec_file_load", "add_key", "request_key", "keyctl", "unshare", "setns", "perf_event_open",
    "fanotify_init", "name_to_handle_at", "open_by_handle_at", "bpf", "userfaultfd", "pidfd_send_signal",
    "pidfd_getfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "open_tree", "move_mount",
    "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
)
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data


def _arg(index: int, high: bool = False) -> int:
    return 16 + 8 * index + (4 if high else 0)  # little-endian: the low word first


class _Program:
    """A classic-BPF program built from short blocks that end in a return (no jump reaches past a block)."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int, int, int]] = []

    def load(self, offset: int) -> None:
        self.code.append((0x20, 0, 0, offset))  # BPF_LD | BPF_W | BPF_ABS

    def ret(self, value: int) -> None:
        self.code.append((0x06, 0, 0, value))  # BPF_RET | BPF_K

    def jump_eq(self, value: int, true: int, false: int) -> None:
        self.code.append((0x15, true, false, value))  # BPF_JMP | BPF_JEQ | BPF_K

    def jump_set(self, bits: int, true: int, false: int) -> None:
        self.code.append((0x45, true, false, bits))  # BPF_JMP | BPF_JSET | BPF_K

    def refuse(self, nr: int, errno: int = EPERM) -> None:
        self.load(_NR)
        self.jump_eq(nr, 0, 1)
        self.ret(RET_ERRNO | errno)

    def allow_if_arg(self, nr: int, arg: int, values: tuple[int, ...], errno: int = EPERM) -> None:
        """``nr`` is allowed when argument ``arg`` (its low 32 bits) is one of ``values``."""
        self.load(_NR)
        self.jump_eq(nr, 0, len(values) + 3)
        self.load(_arg(arg))
        for i, value in enumerate(values):
            self.jump_eq(value, len(values) - i, 0)
        self.ret(RET_ERRNO | errno)
        self.ret(RET_ALLOW)

    def bytes(self) -> bytes:
        return b"".join(struct.pack("=HBBI", *instruction) for instruction in self.code)


def seccomp_program(pid: int, sockets: str) -> bytes:
    """The filter: refuse :data:`REFUSED_SYSCALLS`, threads but no processes, signals to ``pid`` only, no raised
    limits; ``sockets`` is ``"unix"`` (Unix sockets only) or ``"none"``."""
    nr = X86_64
    program = _Program()
    program.load(_ARCH)
    program.jump_eq(AUDIT_ARCH_X86_64, 1, 0)
    program.ret(RET_KILL)
    program.load(_NR)
    program.code.append((0x35, 0, 1, 0x40000000))  # BPF_JGE: the x32 ABI's numbers
    program.ret(RET_ERRNO | EPERM)
    for name in REFUSED_SYSCALLS:
        program.refuse(nr[name])
    program.refuse(nr["clone3"], ENOSYS)  # its flags sit in memory a filter cannot read: glibc falls back to clone
    program.load(_NR)  # clone: a thread (CLONE_THREAD) only
    program.jump_eq(nr["clone"], 0, 4)
    program.load(_arg(0))
    program.jump_set(CLONE_THREAD, 1, 0)
    program.ret(RET_ERRNO | EPERM)
    program.ret(RET_ALLOW)
    program.allow_if_arg(nr["kill"], 0, (pid, 0))
    program.allow_if_arg(nr["tgkill"], 0, (pid,))
    program.allow_if_arg(nr["rt_sigqueueinfo"], 0, (pid,))
    program.allow_if_arg(nr["rt_tgsigqueueinfo"], 0, (pid,))
    program.load(_NR)  # prlimit64: reading a limit, not setting one
    program.jump_eq(nr["prlimit64"], 0, 5)
    program.load(_arg(2))
    program.jump_eq(0, 0, 2)
    program.load(_arg(2, high=True))
    program.jump_eq(0, 1, 0)
    program.ret(RET_ERRNO | EPERM)
    if sockets == "unix":
        program.allow_if_arg(nr["socket"], 0, (AF_UNIX,), EACCES)
        program.allow_if_arg(nr["socketpair"], 0, (AF_UNIX,), EACCES)
    else:
        for name in ("socket", "socketpair", "connect", "bind"):
            program.refuse(nr[name], EACCES)
    program.ret(RET_ALLOW)
    return program.bytes()


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def seccomp(sockets: str = "unix") -> tuple[bool, str]:
    """Install :func:`seccomp_program` on every thread of this process (filters stack: each one only takes away)."""
    if _switched_off():
        return _switched_off()
    if not sys.platform.startswith("linux") or os.uname().machine != "x86_64":
        return False, f"no seccomp filter for {sys.platform}/{os.uname().machine}: system calls are not filtered"
    code = seccomp_program(os.getpid(), sockets)
    prog = _Fprog(len(code) // 8, code)
    libc = _libc()
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, prog): all threads, BLAS's included
    if libc.syscall(317, 1, 1, ctypes.byref(prog)) != 0:
        return False, f"seccomp refused (errno {ctypes.get_errno()}): system calls are not filtered"
    what = "Unix sockets only" if sockets == "unix" else "no sockets"
    return True, f"seccomp: no new process, no exec, {what}, signals to itself only, limits fixed"


def close_sockets() -> tuple[bool, str]:
    """From the first exercise on, no socket may be made at all (the kernel's own are open by then)."""
    return seccomp("none")
