#!/usr/bin/env python3
"""Fails if code in the given objects can leave the upper vector state dirty (STYLE.md 16).

Once an instruction writes the upper bits of ymm0-15/zmm0-15, Intel cores slow every later
legacy-SSE instruction (the dirty-upper-state penalty) until a vzeroupper or vzeroall. So
code that uses those registers must execute vzeroupper before control goes back to code
that may be baseline SSE: before every ret, and before every call or tail jump out of the
objects checked. Compilers insert it for us only sometimes: GCC, for one, leaves a function
that takes a 512-bit argument without one, on the theory that its caller is AVX code that
cleans up (that was issue #12's fold_wide_on).

Usage: check_vzeroupper.py [--objdump PATH] FILE...
       check_vzeroupper.py [--objdump PATH] --self-test [--as PATH]
FILE is an object file, a static library (thin or not) or a linked binary. The check fails
if no function in them uses a ymm or zmm register at all, so it cannot pass vacuously when
the SIMD code moves or stops being built. --self-test assembles small functions with known
answers (SELF_TEST below) and fails unless the check flags exactly the bad ones, so a change
in objdump's output cannot quietly turn the check into a no-op.

What it checks. It disassembles FILE (objdump -d -r) and runs a forward "may be dirty"
data-flow analysis over every instruction of every function, one object at a time:
  - an instruction naming ymm0-15 or zmm0-15 makes the state dirty (reading one counts
    too: conservative); vzeroupper and vzeroall make it clean;
  - edges: fall-through, direct jumps and conditional jumps, including jumps into another
    function of the same object (tail calls) and into its .cold parts in other sections,
    found through the relocations; a direct call into the same object carries the state into
    the callee, which is then checked like any other function;
  - it is an error if the state may be dirty at a ret, at a call or jump to anything outside
    the object (another object, a library, the PLT), or at an indirect call or jump (its
    target is unknown).
Every function is assumed to be entered clean by outside callers, and the state after a call
is taken to be clean (the callee's own returns are checked if it is in the object; outside
ones are baseline code). ymm16-31/zmm16-31 are ignored: they are not part of the tracked
upper state, and SSE code cannot see them (glibc's EVEX string functions use them to avoid
vzeroupper).

What it does not cover: targets of jump tables (indirect jumps) are not followed, which is
sound only because reaching one dirty is already an error; exception landing pads are
entered by the unwinder, not followed here; a function that legitimately returns a ymm/zmm
value, or is called only from AVX code with the state dirty on purpose, would be reported
and needs an allowance added here.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

# ymm0-15 / zmm0-15 only (see the docstring): %ymm0..%ymm9, %ymm10..%ymm15.
UPPER_REG = re.compile(r"%[yz]mm(?:1[0-5]|[0-9])\b")
ANY_WIDE_REG = re.compile(r"%[yz]mm\d+\b")
PREFIXES = {
    "rep", "repz", "repe", "repnz", "repne", "lock", "notrack", "bnd", "cs", "ds", "es", "ss", "fs", "gs",
    "data16", "addr32", "rex", "rex.w", "rex.b", "rex.x", "rex.r", "{vex}", "{vex3}", "{evex}",
}
FILE_HEADER = re.compile(r"^(\S.*):\s+file format \S+$")
SECTION_HEADER = re.compile(r"^Disassembly of section (\S+):$")
SYMBOL_HEADER = re.compile(r"^([0-9a-f]+) <(.+)>:$")
INSTRUCTION = re.compile(r"^\s*([0-9a-f]+):\t(.*)$")
RELOCATION = re.compile(r"^\s*([0-9a-f]+): (R_X86_64_\w+)\s+(\S+)$")
DIRECT_TARGET = re.compile(r"^([0-9a-f]+)(?:\s+<.*>)?$")
SYMBOL_ADDEND = re.compile(r"^(.*?)([+-]0x[0-9a-f]+)?$")


@dataclass
class Insn:
    section: str
    addr: int
    function: str
    mnemonic: str
    operands: str
    relocs: list = field(default_factory=list)  # (type, symbol) applying inside this instruction


@dataclass
class Unit:
    name: str
    insns: dict = field(default_factory=dict)  # (section, addr) -> Insn
    order: list = field(default_factory=list)  # keys in disassembly order
    symbols: dict = field(default_factory=dict)  # symbol name -> (section, addr)


def parse(text, default_name):
    units = []
    unit = None
    section = None
    function = None
    last = None
    for line in text.splitlines():
        if m := FILE_HEADER.match(line):
            unit = Unit(m.group(1))
            units.append(unit)
            section = function = last = None
        elif m := SECTION_HEADER.match(line):
            if unit is None:
                unit = Unit(default_name)
                units.append(unit)
            section, function, last = m.group(1), None, None
            unit.symbols.setdefault(section, (section, 0))
        elif m := SYMBOL_HEADER.match(line):
            function = m.group(2)
            unit.symbols[function] = (section, int(m.group(1), 16))
        elif m := RELOCATION.match(line):
            if last is not None:
                last.relocs.append((m.group(2), m.group(3)))
        elif (m := INSTRUCTION.match(line)) and function is not None:
            addr = int(m.group(1), 16)
            text_part = m.group(2).split("#", 1)[0].strip()
            words = text_part.split()
            while words and words[0].lower() in PREFIXES and len(words) > 1:
                words.pop(0)
            if not words:
                continue
            insn = Insn(section, addr, function, words[0], " ".join(words[1:]))
            unit.insns[(section, addr)] = insn
            unit.order.append((section, addr))
            last = insn
    return units


def classify(insn):
    """One of: ret, jmp, jcc, call, stop (no fall-through, not an exit), plain."""
    m = insn.mnemonic
    if m.startswith("ret") or m in ("iret", "iretq", "sysret"):
        return "ret"
    if m in ("jmp", "jmpq"):
        return "jmp"
    if m in ("call", "callq"):
        return "call"
    if (m.startswith("j") or m.startswith("loop")) and m not in ("jmp", "jmpq"):
        return "jcc"
    if m in ("ud2", "ud1", "ud0", "hlt", "int3"):
        return "stop"
    return "plain"


def branch_target(unit, insn):
    """(section, addr) of a direct branch's target, 'external' or 'indirect'."""
    if insn.operands.startswith("*"):
        return "indirect"
    for _, symbol in insn.relocs:  # in an object file the relocation, not the placeholder, says where
        m = SYMBOL_ADDEND.match(symbol)
        name, addend = m.group(1), int(m.group(2) or "0", 16)
        if name.endswith("@plt") or name not in unit.symbols:
            return "external"
        section, base = unit.symbols[name]
        # A rel32 in the last four bytes of the instruction: target = S + A - P + end, P = end - 4.
        return (section, base + addend + 4)
    m = DIRECT_TARGET.match(insn.operands)
    if not m:
        return "indirect"
    key = (insn.section, int(m.group(1), 16))
    return key if key in unit.insns else "external"


def check(unit):
    """Returns (functions using wide registers, [(function, error message)])."""
    wide_functions = set()
    succ = {}  # key -> list of successor keys carrying the out state
    exits = {}  # key -> description of the exit checked on the in state
    for i, key in enumerate(unit.order):
        insn = unit.insns[key]
        if ANY_WIDE_REG.search(insn.operands):
            wide_functions.add(insn.function)
        kind = classify(insn)
        nxt = unit.order[i + 1] if i + 1 < len(unit.order) else None
        falls_to = nxt if nxt and unit.insns[nxt].function == insn.function and nxt[0] == insn.section else None
        out = []
        if kind == "ret":
            exits[key] = "returns"
        elif kind in ("jmp", "jcc", "call"):
            target = branch_target(unit, insn)
            if target == "indirect":
                exits[key] = f"makes an indirect {kind} ({insn.mnemonic} {insn.operands})"
            elif target == "external":
                where = insn.relocs[0][1] if insn.relocs else insn.operands
                exits[key] = f"leaves the object ({insn.mnemonic} to {where})"
            elif target in unit.insns:
                out.append(target)
            else:
                exits[key] = f"branches to an unknown address ({insn.mnemonic} {insn.operands})"
            if kind == "jcc" and falls_to:
                out.append(falls_to)
            # A call's state goes into the callee only: when the callee returns, its own ret has
            # been checked clean (or reported), so nothing dirty falls through past the call.
        elif kind == "plain" and falls_to:
            out.append(falls_to)
        succ[key] = out

    def cleans(insn):
        return insn.mnemonic in ("vzeroupper", "vzeroall")

    # Forward propagation of "may be dirty", seeded at the output of every instruction naming
    # ymm0-15/zmm0-15. dirty_in[key] = a wide instruction whose state may reach key's input
    # (for the error message). A call's only successor is its callee (see above).
    dirty_in = {}
    dirty_out = set()
    work = [(key, key) for key in unit.order if UPPER_REG.search(unit.insns[key].operands)]
    while work:
        key, source = work.pop()
        if key in dirty_out or cleans(unit.insns[key]):
            continue
        dirty_out.add(key)
        for s in succ[key]:
            if s not in dirty_in:
                dirty_in[s] = source
                work.append((s, source))

    errors = []
    for key, what in exits.items():
        if key in dirty_in:
            insn = unit.insns[key]
            src = unit.insns[dirty_in[key]]
            errors.append((insn.function,
                f"{unit.name}: {insn.function} {what} at {insn.section}+{insn.addr:#x} with the upper vector "
                f"state possibly dirty (from {src.mnemonic} {src.operands} at {src.function} "
                f"{src.section}+{src.addr:#x}, no vzeroupper on the way)"))
    return wide_functions, errors


# Each bad_* function leaves dirty one way; the good_* ones must pass. SELF_TEST_ERRORS names
# the function each error is reported in (the one holding the ret or jump).
SELF_TEST = """
.text
bad_branch:             # one of two returns is not guarded
  vpaddd %ymm1, %ymm2, %ymm3
  test %eax, %eax
  jz 1f
  vzeroupper
  ret
1: ret
good_branches:          # both are, and the tail call out is clean
  vpaddd %zmm1, %zmm2, %zmm3
  test %eax, %eax
  jz 1f
  vzeroupper
  ret
1: vzeroupper
  jmp external_function
bad_call:               # calls out dirty
  vpaddd %zmm1, %zmm2, %zmm3
  call external_function
  vzeroupper
  ret
bad_indirect:           # jumps somewhere unknown dirty
  vpaddd %ymm1, %ymm2, %ymm3
  jmp *%rax
good_high_registers:    # ymm16-31 are not tracked state
  vpaddd %ymm17, %ymm18, %ymm19
  ret
bad_tail:               # a tail call inside the object carries the state along
  vpaddd %ymm1, %ymm2, %ymm3
  jmp bad_tail_callee
bad_tail_callee:
  ret
good_helper_call:       # a callee inside the object that cleans before returning
  vpaddd %ymm1, %ymm2, %ymm3
  call good_helper
  ret
good_helper:
  vzeroupper
  ret
bad_loop:               # the wide instruction comes after the vzeroupper on the back edge
1: vzeroupper
  vpaddd %ymm1, %ymm2, %ymm3
  dec %ecx
  jnz 1b
  ret
bad_cold:               # a cold part in another section, reached by relocation
  vpaddd %ymm1, %ymm2, %ymm3
  test %eax, %eax
  jz bad_cold.cold
  vzeroupper
  ret
good_cold:
  vpaddd %ymm1, %ymm2, %ymm3
  vzeroupper
  test %eax, %eax
  jz good_cold.cold
  ret
.section .text.unlikely,"ax",@progbits
bad_cold.cold:
  nop
  ret
good_cold.cold:
  ret
"""
SELF_TEST_ERRORS = {"bad_branch", "bad_call", "bad_indirect", "bad_tail_callee", "bad_loop", "bad_cold.cold"}


def self_test(objdump, assembler):
    with tempfile.TemporaryDirectory() as tmp:
        source, obj = os.path.join(tmp, "cases.s"), os.path.join(tmp, "cases.o")
        with open(source, "w", encoding="utf-8") as f:
            f.write(SELF_TEST)
        subprocess.run([assembler, source, "-o", obj], check=True)
        text = subprocess.run([objdump, "-d", "-r", "--no-show-raw-insn", obj], capture_output=True, text=True,
                              check=True).stdout
    flagged = set()
    for unit in parse(text, "self-test"):
        _, errors = check(unit)
        flagged |= {function for function, _ in errors}
    if flagged != SELF_TEST_ERRORS:
        print(f"ERROR: self-test flagged {sorted(flagged)}, expected {sorted(SELF_TEST_ERRORS)}", file=sys.stderr)
        return 1
    print(f"OK: self-test flagged exactly {sorted(flagged)}")
    return 0


def demangle(lines):
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt:
        return lines
    out = subprocess.run([cxxfilt], input="\n".join(lines), capture_output=True, text=True, check=False)
    return out.stdout.splitlines() if out.returncode == 0 else lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objdump", default="objdump")
    parser.add_argument("--as", dest="assembler", default="as")
    parser.add_argument("--self-test", action="store_true")
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    if args.self_test:
        return self_test(args.objdump, args.assembler)
    if not args.files:
        parser.error("no files to check")

    wide = set()
    errors = []
    functions = 0
    for path in args.files:
        result = subprocess.run([args.objdump, "-d", "-r", "--no-show-raw-insn", path], capture_output=True,
                                text=True, check=False)
        if result.returncode != 0:
            print(f"objdump failed on {path}:\n{result.stderr}", file=sys.stderr)
            return 2
        for unit in parse(result.stdout, path):
            functions += len({insn.function for insn in unit.insns.values()})
            unit_wide, unit_errors = check(unit)
            wide |= {f"{unit.name}: {f}" for f in unit_wide}
            errors += [message for _, message in unit_errors]

    for line in demangle(sorted(wide)):
        print(f"uses ymm/zmm: {line}")
    print(f"{functions} functions checked, {len(wide)} use ymm/zmm registers")
    if errors:
        for line in demangle(errors):
            print(f"ERROR: {line}", file=sys.stderr)
        return 1
    if not wide:
        print("ERROR: no function uses a ymm or zmm register: the check would be vacuous (were the SIMD objects "
              "passed?)", file=sys.stderr)
        return 1
    print("OK: every path from a ymm/zmm instruction to a return or an exit passes a vzeroupper")
    return 0


if __name__ == "__main__":
    sys.exit(main())
