"""How many blocks of a kernel fit on one SM: the course's occupancy calculator, for lessons and kernels alike.

A block takes three resources of an SM: warp slots (its threads / 32), registers (allocated per warp, in units of
:attr:`SmLimits.register_unit`, from the SM's sub-partitions) and shared memory (its static and dynamic bytes plus
a per-block reservation, in units of :attr:`SmLimits.shared_unit`). The fewest blocks any one resource allows is
the occupancy, and that resource is what stops one more block (NVIDIA's occupancy calculator; CUDA C Programming
Guide, "Compute Capabilities"). :data:`SM90` holds the H100/H200's limits; :func:`limits_of` reads this GPU's from
its device attributes (for the rules' granularities it keeps SM90's: Ampere and Hopper share them).

    >>> occupancy(255, 128, 16384).blocks_per_sm   # 256 x 32 registers per warp: 2 warps per sub-partition
    2
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlsys_lab.validation import check_choice, check_int, check_number, check_type

WARP = 32


@dataclass(frozen=True)
class SmLimits:
    """What one SM can hold (CUDA C Programming Guide, "Compute Capabilities", table of technical
    specifications; allocation granularities as in NVIDIA's occupancy calculator)."""

    registers: int = 65_536
    sub_partitions: int = 4  # registers are split evenly between the 4 warp schedulers
    register_unit: int = 256  # registers are allocated per warp in multiples of this
    max_registers_per_thread: int = 255
    max_warps: int = 64
    max_blocks: int = 32
    shared_bytes: int = 228 * 1024
    reserved_shared_per_block: int = 1024
    shared_unit: int = 128

    def __post_init__(self) -> None:
        for name in ("registers", "sub_partitions", "register_unit", "max_registers_per_thread", "max_warps",
                     "max_blocks", "shared_bytes", "shared_unit"):
            check_int(name, getattr(self, name), low=1, high=2**24)
        check_int("reserved_shared_per_block", self.reserved_shared_per_block, low=0, high=self.shared_bytes)


SM90 = SmLimits()  # H100 / H200


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks of a kernel per SM, the warps they hold, and what stops one more block."""

    blocks_per_sm: int
    warps_per_sm: int
    fraction: float  # of the SM's warp slots
    limited_by: str  # "registers", "shared memory", "warps" or "blocks"

    def __post_init__(self) -> None:
        check_int("blocks_per_sm", self.blocks_per_sm, low=0)
        check_int("warps_per_sm", self.warps_per_sm, low=0)
        check_number("fraction", self.fraction, low=0.0, high=1.0)
        check_choice("limited_by", self.limited_by, ("registers", "shared memory", "warps", "blocks"))


def occupancy(registers_per_thread: int, threads_per_block: int, shared_bytes_per_block: int,
              limits: SmLimits = SM90) -> Occupancy:
    """Blocks per SM from the three resources a block takes (the occupancy calculator's rules).

    >>> occupancy(255, 128, 16384, SM90).limited_by
    'registers'
    """
    check_type("limits", limits, SmLimits)
    check_int("registers_per_thread", registers_per_thread, low=1, high=limits.max_registers_per_thread)
    check_int("threads_per_block", threads_per_block, low=1, high=1024)
    check_int("shared_bytes_per_block", shared_bytes_per_block, low=0, high=limits.shared_bytes)
    warps = -(-threads_per_block // WARP)
    per_warp = -(-registers_per_thread * WARP // limits.register_unit) * limits.register_unit
    warps_by_registers = (limits.registers // limits.sub_partitions // per_warp) * limits.sub_partitions
    shared = -(-(shared_bytes_per_block + limits.reserved_shared_per_block) // limits.shared_unit) * limits.shared_unit
    by = {"warps": limits.max_warps // warps, "blocks": limits.max_blocks,  # ties name the first of these
          "shared memory": limits.shared_bytes // shared if shared else limits.max_blocks,  # none taken: no limit
          "registers": warps_by_registers // warps}
    limiter = min(by, key=by.get)
    blocks = by[limiter]
    return Occupancy(blocks, blocks * warps, blocks * warps / limits.max_warps, limiter)


def limits_of(attributes: dict) -> SmLimits:
    """This GPU's :class:`SmLimits` from its CUDA device attributes (``cupy.cuda.Device().attributes``): registers,
    shared memory, warps and blocks per SM; the allocation granularities are SM90's."""
    check_type("attributes", attributes, dict)
    keys = ("MaxRegistersPerMultiprocessor", "MaxSharedMemoryPerMultiprocessor", "MaxThreadsPerMultiProcessor")
    missing = [key for key in keys if key not in attributes]
    if missing:
        raise ValueError(f"attributes must be a GPU's device attributes; {', '.join(missing)} missing")
    return replace(SM90, registers=int(attributes["MaxRegistersPerMultiprocessor"]),
                   shared_bytes=int(attributes["MaxSharedMemoryPerMultiprocessor"]),
                   max_warps=int(attributes["MaxThreadsPerMultiProcessor"]) // WARP,
                   max_blocks=int(attributes.get("MaxBlocksPerMultiprocessor", SM90.max_blocks)))
