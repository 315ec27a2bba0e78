"""A newcomer's first hour, walked from the README as far as it goes offline: the two set-up commands and what make
plans for them, every command copy-pasteable as printed, every variable named, then `make student` and `make lab`
in a fresh folder, a handout opened from notebooks/student/ and its first check run in the Lab's own kernel.

(The install itself needs the package index; `tests/course/test_binder.py` resolves the pins against it, and
`tests/course/test_lab_starts.py` starts `make lab` in the repository.)"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import secrets
import shutil
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import nbformat
import pytest
from labserver import MAKE_N, ROOT, free_port, http_get, lab_environment, running

README = (ROOT / "README.md").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()
# Set by the grader for the kernel it starts, never by a person.
INTERNAL_VARIABLES = {"MLSYS_LAB_GRADING_FD", "MLSYS_LAB_MEMORY_MB", "MLSYS_LAB_TEST_FAULTS"}
BARE_TOOLS = ("mlsys-lab", "pytest", "jupyter", "pip", "python -m", "ruff", "repo2docker")


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end > 0 else len(README)]


def make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", MAKEFILE, re.MULTILINE))


def fenced(text: str, kind: str = "bash") -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", text, re.DOTALL)


def commands() -> list[str]:
    """Every command the README prints: lines of its bash blocks, and inline code that starts with a tool's name."""
    lines = [line.split("  #")[0].strip() for block in fenced(README) for line in block.splitlines()]
    inline = [span for span in re.findall(r"`([^`\n]+)`", README)
              if re.match(r"(\w+=\S+ )*(make|\.venv/bin/|mlsys-lab|pytest|jupyter|pip|python)\b", span)]
    return [c for c in lines + inline if c]


def make_plan(target: str, *variables: str) -> list[str]:
    done = subprocess.run([*MAKE_N, target, *variables], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


@pytest.fixture(autouse=True)
def needs_make():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")


def test_setup_is_two_commands_that_the_makefile_plans(tmp_path):
    """Exactly `make lab` and `make test-all`; on a fresh machine they create .venv, install, then start or run every
    test. `make test`, the developer's quick lane, is named in the text, not as a third command."""
    setup = section("Set up").split("\n### ")[0]
    blocks = [block.split("#")[0].strip() for block in fenced(setup)]
    assert blocks == ["make lab", "make test-all"]
    assert "`make test` is the quick lane" in setup
    venv = tmp_path / "fresh-venv"
    lab = make_plan("lab", f"VENV={venv}")
    assert lab[0] == f"python3 -m venv {venv}"
    assert any(line.startswith(f"{venv}/bin/python -m pip install -q -e .") for line in lab)
    assert lab[-1].startswith(f"{venv}/bin/jupyter lab --ServerApp.port=8888 ")
    assert lab[-1].endswith("notebooks/student/00_start_here.ipynb")  # the handout, not the solved lesson
    every = make_plan("test-all", f"VENV={venv}")
    assert any("pip install -q -e '.[test]'" in line for line in every)
    assert re.match(rf"{re.escape(str(venv))}/bin/python -m pytest .* --exhaustive tests notebooks$", every[-1])
    quick = make_plan("test", f"VENV={venv}")
    assert any("pip install -q -e '.[test]'" in line for line in quick)
    assert re.match(rf"{re.escape(str(venv))}/bin/python -m pytest .* tests notebooks$", quick[-1])
    assert quick[-1].replace(" tests notebooks", " --exhaustive tests notebooks") == every[-1]


def test_every_command_is_copy_pasteable():
    """Tools carry the .venv/bin/ prefix, the executables exist in the course's environment, make targets exist."""
    found = commands()
    assert len(found) > 10
    for command in found:
        words = [w for w in command.split() if not re.match(r"^[A-Z_]+=", w)]
        if not words:
            continue
        head = " ".join(words[:2])
        assert not any(head == tool or head.startswith(tool + " ") or words[0] == tool for tool in BARE_TOOLS), (
            f"not copy-pasteable as printed (use .venv/bin/): {command}")
        if words[0].startswith(".venv/bin/"):
            assert (Path(sys.prefix) / "bin" / words[0].removeprefix(".venv/bin/")).exists(), command
        if words[0] == "make" and len(words) > 1 and not words[1].startswith("-"):
            assert words[1] in make_targets(), command


def test_readme_names_every_variable_a_user_may_set():
    """Every MLSYS_* variable the code or the tests read, and every variable the Makefile lets you set."""
    read = set()
    for path in [*(ROOT / "mlsys_lab").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        read |= set(re.findall(r"\b(MLSYS_[A-Z_]+)\b", path.read_text()))
    read -= INTERNAL_VARIABLES
    make_variables = set(re.findall(r"^(\w+)\s*\?=", MAKEFILE, re.MULTILINE))
    table = section("Set up").split("### Variables you may set")[1]
    named = set(re.findall(r"`([A-Z_]+)`", table))
    assert read | make_variables <= named, f"undocumented: {sorted((read | make_variables) - named)}"
    assert {"PORT", "LAB_FLAGS", "MLSYS_LAB_BACKEND", "MLSYS_LAB_BROWSER_LESSONS", "MLSYS_LAB_CHECK_SEED"} <= named


def test_student_and_grade_plans_match_the_readme():
    assert make_plan("student", f"VENV={sys.prefix}")[-1] == f"{sys.prefix}/bin/mlsys-lab student notebooks " \
                                                             "notebooks/student"
    grade = make_plan("grade", f"VENV={sys.prefix}", "REF=notebooks/00_start_here.ipynb", "SUBMISSIONS=s/")[-1]
    assert grade.endswith("--csv grades.csv --json-file grades.jsonl")
    assert "notebooks/student/" in section("Set up") and "notebooks/student/" in section("Instructor guide")


async def run_cells(ws_url: str, sources: list[str], timeout_s: float = 180) -> list[tuple[str, str | None]]:
    """Run each source in the kernel behind ``ws_url`` (the Lab's websocket): (stdout, error name or None) each."""
    from tornado.websocket import websocket_connect

    ws = await websocket_connect(ws_url)
    session, results = uuid.uuid4().hex, []
    try:
        for source in sources:
            msg_id = uuid.uuid4().hex
            await ws.write_message(json.dumps({
                "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "newcomer",
                           "session": session, "date": "", "version": "5.3"},
                "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                "content": {"code": source, "silent": False, "store_history": True, "user_expressions": {},
                            "allow_stdin": False, "stop_on_error": True}}))
            stdout, error = [], None
            while True:
                raw = await asyncio.wait_for(ws.read_message(), timeout_s)
                if raw is None:
                    raise RuntimeError("the kernel's websocket closed")
                if isinstance(raw, bytes):
                    continue
                msg = json.loads(raw)
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = msg["msg_type"]
                if kind == "stream" and msg["content"]["name"] == "stdout":
                    stdout.append(msg["content"]["text"])
                elif kind == "error":
                    error = f"{msg['content']['ename']}: {msg['content']['evalue']}"
                elif kind == "status" and msg["content"]["execution_state"] == "idle":
                    break
            results.append(("".join(stdout), error))
            if error:
                break
    finally:
        ws.close()
    return results



def run_in_own_loop(coroutine):
    """``asyncio.run`` in a thread of its own: an earlier test in this process (Playwright's sync API) may have
    left an event loop running in the main thread, where ``asyncio.run`` refuses to start."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()

@pytest.mark.slow
def test_newcomer_opens_a_handout_and_runs_its_first_check(tmp_path):
    venv = Path(sys.prefix)
    if not (venv / "bin" / "jupyter").exists():
        pytest.skip("run the tests from the course's virtual environment (make test)")
    # A fresh clone, as far as make sees it: the Makefile, pyproject.toml and the lessons (student/ does not exist).
    clone = tmp_path / "clone"
    (clone / "notebooks").mkdir(parents=True)
    for name in ("Makefile", "pyproject.toml"):
        (clone / name).symlink_to(ROOT / name)
    for lesson in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"):
        (clone / "notebooks" / lesson.name).symlink_to(lesson)
    plan = subprocess.run([*MAKE_N, "student", f"VENV={venv}"], cwd=clone, capture_output=True, text=True,
                          check=True).stdout
    if "pip install" in plan:
        pytest.skip("the course's .venv is older than pyproject.toml: run `make lab` once, then the tests")
    subprocess.run(["make", "-s", "student", f"VENV={venv}"], cwd=clone, check=True, capture_output=True,
                   timeout=300)
    port, token = free_port(), secrets.token_hex(16)
    flags = f"--no-browser --ServerApp.ip=127.0.0.1 --IdentityProvider.token={token}"
    command = ["make", "-s", "lab", f"VENV={venv}", f"PORT={port}", f"LAB_FLAGS={flags}"]
    with running(command, port, token, clone, lab_environment(tmp_path)) as server:
        code, listing = http_get(server.url("api/contents"))  # the Lab is rooted at the handouts' folder
        handouts = {item["name"] for item in json.loads(listing)["content"]}
        assert code == 200 and handouts == {p.name for p in (clone / "notebooks").glob("*.ipynb")}
        code, body = http_get(server.url("api/contents/00_start_here.ipynb"))
        handout = nbformat.from_dict(json.loads(body)["content"])
        assert code == 200 and "raise NotImplementedError()" in "".join(c.source for c in handout.cells)
        request = urllib.request.Request(server.url("api/kernels"), data=b"{}", method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            kernel_id = json.loads(response.read())["id"]
        code_cells = [c for c in handout.cells if c.cell_type == "code"]
        first_check = next(i for i, c in enumerate(code_cells) if c.source.lstrip().startswith("# NBVAL_CHECK_OUTPUT")
                           and re.search(r"^check_\w+\(", c.source, re.MULTILINE))
        ws_url = server.url(f"api/kernels/{kernel_id}/channels").replace("http://", "ws://")
        results = run_in_own_loop(run_cells(ws_url, [c.source for c in code_cells[:first_check + 1]]))
        assert all(error is None for _, error in results), [r for r in results if r[1]]
        name = re.search(r"^check_(\w+)\(", code_cells[first_check].source, re.MULTILINE).group(1)
        assert results[-1][0].strip() == f"… {name}: not attempted yet"
        # The learner writes the function (here: the reference's), runs it and the check again.
        reference = nbformat.read(ROOT / "notebooks" / "00_start_here.ipynb", as_version=4)
        solved = next(c.source for c in reference.cells if re.search(rf"^def {name}\(", c.source, re.MULTILINE))
        again = run_in_own_loop(run_cells(ws_url, [solved, code_cells[first_check].source]))
        assert again[-1][1] is None and again[-1][0].startswith(f"✓ {name}: ")
