#!/usr/bin/env python3
"""The tool outputs quoted in the docs, regenerated so they cannot go stale.

A fenced block (```) whose first line starts with "$ " is a shell session:
each "$ COMMAND" line is run by bash (in the repository, with the tools of
BUILD/tools first on PATH, NO_COLOR=1), one shell for the block so that
"$ echo $?" sees the command before it, and the block becomes each
command followed by its output (stdout and stderr). A command may pipe
into head, sed, ... to quote an excerpt; the doc shows the pipe.

    python3 scripts/gradcheck_docs.py --update [--build DIR] [FILE...]
    python3 scripts/gradcheck_docs.py --check  [--build DIR] [FILE...]

Without FILE: the pages that quote the tool, DOCS below (the gradcheck
reference, its guide, the experiments).

--check exits 1 when a block's output differs from the doc's, with what
the run measures masked on both sides: times ("in 0.02 s", "183.4 us a
check", JSON "seconds"), and the lines of files written or pictures
rendered (gnuplot may be missing). A block whose fence is ```text is left
alone, so is a block whose first command line ends with "  # as is"."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEP = "@@gradcheck_docs@@"
DOCS = ["docs/gradcheck.md", "docs/gradcheck-guide.md", "docs/experiments.md"]

MASKS = [
    (re.compile(r"\bin \d+(\.\d+)? s\b"), "in <time> s"),
    (re.compile(r"\d+(\.\d+)? us\b"), "<time> us"),
    (re.compile(r'"(check_)?seconds":[-+0-9.eE]+'), r'"\1seconds":<time>'),
]
SKIP_LINE = re.compile(r"^\s*(wrote |\S+\.png|gnuplot)")


def mask(text):
    out = []
    for line in text.splitlines():
        if SKIP_LINE.match(line):
            continue
        for rx, rep in MASKS:
            line = rx.sub(rep, line)
        out.append(line.rstrip())
    return "\n".join(out).strip("\n")


def blocks(lines):
    """(start, end) line indexes of the shell-session blocks: the lines
    strictly between the fences."""
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            fence = lines[i].strip()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if fence == "```" and i + 1 < j and lines[i + 1].startswith("$ ") and \
                    not lines[i + 1].rstrip().endswith("# as is"):
                yield i + 1, j
            i = j + 1
        else:
            i += 1


def run_block(commands, build):
    env = dict(os.environ, NO_COLOR="1", PATH=os.path.join(build, "tools") + os.pathsep + os.environ["PATH"])
    script = "".join(f"{c}\necho {SEP}\n" for c in commands)
    p = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=False, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    parts = p.stdout.split(SEP + "\n")
    return [part.rstrip("\n") for part in parts[: len(commands)]]


def main(argv):
    mode = None
    build = os.path.join(ROOT, "build")
    files = []
    it = iter(argv)
    for a in it:
        if a in ("--update", "--check"):
            mode = a
        elif a == "--build":
            build = os.path.abspath(next(it))
        else:
            files.append(a)
    if not mode:
        sys.exit(__doc__)
    files = files or [os.path.join(ROOT, d) for d in DOCS]
    stale = 0
    for path in files:
        stale_before = stale
        with open(path) as f:
            lines = f.read().split("\n")
        out, last = [], 0
        for start, end in blocks(lines):
            body = lines[start:end]
            commands = [l[2:] for l in body if l.startswith("$ ")]
            outputs = run_block(commands, build)
            new = []
            for c, o in zip(commands, outputs):
                new.append("$ " + c)
                if o:
                    new.extend(o.split("\n"))
            changed = mask("\n".join(new)) != mask("\n".join(body))
            if changed:
                stale += 1
                if mode == "--check":
                    print(f"{path}:{start}: stale output of $ {commands[0]}")
                    old_m, new_m = mask("\n".join(body)).split("\n"), mask("\n".join(new)).split("\n")
                    for a, b in zip(old_m + [""] * len(new_m), new_m + [""] * len(old_m)):
                        if a != b:
                            print(f"    doc: {a}\n    now: {b}")
                            break
            out.extend(lines[last:start])
            out.extend(new if mode == "--update" and changed else body)  # times alone: left as they are
            last = end
        out.extend(lines[last:])
        if mode == "--update":
            with open(path, "w") as f:
                f.write("\n".join(out))
            print(f"{path}: {stale - stale_before} block(s) refreshed")
    return 1 if mode == "--check" and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
