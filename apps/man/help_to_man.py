#!/usr/bin/env python3
"""Writes a tool's man page (roff with the man(7) macros) from what its --help prints, at build time.

    help_to_man.py --name uroce-perf --summary "..." --version 0.1.0 --output uroce-perf.1 TOOL [SEE_ALSO...]

The --help text is the one description of a tool's options, so the man page is made from it rather than written
twice. It reads the layout every uroce tool's usage() follows: the usage line(s) first (SYNOPSIS), headings
that end in ':' at the left margin (a subsection each), option lines indented and starting with '-', their
description after two or more spaces and continued on lines indented further, and anything else as running
text. help2man does the same for GNU-style help; this needs only python3, which the build has anyway.
"""

import argparse
import re
import subprocess
import sys

OPTION = re.compile(r"^(?P<indent>\s+)(?P<option>-\S.*?)(?:\s{2,}(?P<text>\S.*))?$")


def escape(text: str) -> str:
    """Roff-safe text: backslashes and hyphens escaped, and no line may begin with a control character."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text.startswith((".", "'")) else text


def synopsis(lines: list[str], name: str) -> tuple[list[str], list[str]]:
    """Splits off the usage lines: "usage: NAME ...", or "Usage:" alone, each followed by more "NAME ..." lines."""
    usage: list[str] = []
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i < len(lines) and lines[i].strip().lower().startswith("usage:"):
        first = lines[i].strip()[len("usage:"):].strip()
        if first:
            usage.append(first)
        i += 1
    while i < len(lines) and lines[i].strip().startswith(name):
        usage.append(lines[i].strip())
        i += 1
    return usage, lines[i:]


def body(lines: list[str]) -> list[str]:
    """The DESCRIPTION and its option lists, as roff."""
    out: list[str] = []
    option_indent = None  # set while an option's description may continue on the next, further indented lines

    def paragraph() -> None:
        if out and out[-1] not in (".PP",) and not out[-1].startswith(".SS"):
            out.append(".PP")

    for raw in lines:
        line = raw.rstrip()
        indent = len(line) - len(line.lstrip())
        if not line:
            option_indent = None
            paragraph()
        elif option_indent is not None and indent > option_indent + 2:
            out.append(escape(line.strip()))
        elif (match := OPTION.match(line)) and (match["text"] or all(w.startswith("-") for w in match["option"].split())):
            option_indent = len(match["indent"])
            out += [".TP", "\\fB" + escape(match["option"]) + "\\fR"]
            if match["text"]:
                out.append(escape(match["text"]))
        elif indent == 0 and line.endswith(":"):
            option_indent = None
            out.append(".SS " + escape(line[:-1]))
        else:
            if option_indent is not None:  # running text after an option list starts a paragraph of its own
                paragraph()
            option_indent = None
            out.append(escape(line.strip()))
    while out and out[-1] == ".PP":
        out.pop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--summary", required=True, help="the one line after the name in NAME")
    parser.add_argument("--version", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("tool", help="the built program, run with --help")
    parser.add_argument("see_also", nargs="*", help="other pages for SEE ALSO, e.g. uroce-rping")
    args = parser.parse_args()

    result = subprocess.run([args.tool, "--help"], capture_output=True, text=True, check=False, timeout=60)
    if result.returncode != 0 or not result.stdout.strip():
        print(f"help_to_man.py: '{args.tool} --help' exited {result.returncode} and printed:\n"
              f"{result.stdout}{result.stderr}", file=sys.stderr)
        return 1
    usage, rest = synopsis(result.stdout.splitlines(), args.name)
    if not usage:
        print(f"help_to_man.py: '{args.tool} --help' has no usage line naming {args.name}", file=sys.stderr)
        return 1

    page = [
        f'.TH {args.name.upper()} 1 "" "uroce {args.version}" "uroce tools"',
        ".SH NAME",
        f"{escape(args.name)} \\- {escape(args.summary)}",
        ".SH SYNOPSIS",
    ]
    page += [".nf"] + [escape(line) for line in usage] + [".fi", ".SH DESCRIPTION"] + body(rest)
    page += [
        ".SH FILES",
        ".TP",
        "\\fI<prefix>/share/uroce/default.yaml\\fR",
        "the configuration compiled into every uroce program (two ports joined by an in-process ring link)",
        ".TP",
        "\\fI<prefix>/share/uroce/examples/\\fR",
        "example configurations for real devices (\\fB\\-\\-config\\fR FILE)",
    ]
    if args.see_also:
        page += [".SH SEE ALSO", ", ".join(f"\\fB{escape(other)}\\fR(1)" for other in args.see_also)]
    with open(args.output, "w", encoding="utf-8") as output:
        output.write("\n".join(page) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
