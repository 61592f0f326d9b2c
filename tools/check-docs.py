#!/usr/bin/env python3
"""Runs the fenced code blocks of the documentation, so that the docs cannot
drift from the tools.

Usage:
  check-docs.py --bin BUILD/bin [--root SRC] [--cxx g++] [--cuda-include DIR]
                [--jobs N] [--timeout S] [--verbose] [FILE.md ...]

Without files it checks README.md and every docs/**/*.md. What it does with
a block depends on its language tag:

  mlir           A block holding a whole `attn.kernel` (no `...` in it) is
                 compiled to PTX with attnc; it must succeed and hold an
                 `.entry`. Other mlir blocks are fragments: counted, not run.
  sh, bash,      The block runs as one bash script (`set -e -o pipefail`).
  shell          Lines starting with `$ ` make it a transcript instead: only
                 those lines run, the rest is output and is not compared.
  console, or    A transcript, as above. An untagged block without `$ `
  no tag         lines is text.
  cpp, c++       Compiled with `-fsyntax-only` against the public headers.
                 A block with `int main` is a whole file; any other block is
                 a fragment: its #include / using-namespace lines go on top
                 and the rest becomes a function body, with placeholders
                 for the names fragments leave undefined (PLACEHOLDERS).
  anything else  Text: counted, not run.

Every page runs in a temp directory of its own, its blocks in order. The
directory links to the source tree's top-level entries (docs/, tools/, ...)
and has build/bin pointing at --bin, so `build/bin/attnc docs/examples/x.mlir`
works as written; --bin is also first on PATH. HOME is the temp directory
and the attnc variables are unset, so no block reads or clears the user's
kernel cache or tuning database.

A block may be preceded by marker lines (HTML comments, invisible when the
page is rendered; only blank lines may stand between a marker and its block):

  <!-- docs-test: skip (REASON) -->           do not run the block
  <!-- docs-test: skip-lines /REGEX/ (REASON) -->
                                              do not run the commands of an
                                              sh block that match REGEX
  <!-- docs-test: setup COMMAND -->           run COMMAND in the page's
                                              directory before the block
  <!-- docs-test: file NAME -->               write an mlir block to NAME
                                              (later blocks may use it), then
                                              compile it as usual
  <!-- docs-test: error NAME [ARGS] -->       write an mlir block to NAME;
                                              `attnc NAME ARGS` must fail and
                                              its stderr must equal the next
                                              fenced block
  <!-- docs-test: output -->                  an sh block's stdout must equal
                                              the next fenced block
  <!-- docs-test: same-as PATH -->            the block must equal the file
                                              PATH of the source tree, less
                                              the file's leading // comments

Skips are printed with their reasons, so a skip is never silent. An unknown
marker, a skip without a reason or a marker without a block is an error.
Exit status: 0 when every checked block passed, 1 otherwise.
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile
import time

# Names the C++ fragments of the docs use without defining them: declared,
# never defined, since fragments are only compiled. A fragment that defines
# one of them shadows it (a local in the function body).
PLACEHOLDERS = """
extern void *qPtr, *kPtr, *vPtr, *oPtr, *slopesPtr, *docIdsPtr, *biasPtr;
extern float *lsePtr, *lse;
extern int64_t batch, seqQ, seqK;
extern CUstream stream;
extern attn::TensorView q, k, v, o, dO, dq, dk, dv;
extern attn::Spec spec;
extern attn::Compiler compiler;
extern attn::Kernel kernel;
extern attn::Module module;
extern attn::AttnLaunchConfig config;
extern attn::KernelFunction function;
"""

FRAGMENT_PRELUDE = """#include "attn/Compiler/Jit.h"
#include "attn/runtime/Runtime.h"
#include <cstdint>
#include <string>
#include <vector>
"""

SHELL_TAGS = {"sh", "bash", "shell"}
CXX_TAGS = {"cpp", "c++", "cxx"}
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(.*?)\s*-->\s*$")
FENCE_OPEN = re.compile(r"^(\s*)(```+)\s*([\w+-]*)\s*$")


def normalize(text):
    """Text compared line by line, without trailing blanks."""
    return "\n".join(line.rstrip() for line in text.strip().split("\n"))


class Block:
    def __init__(self, path, line, tag, text, markers):
        self.path = path      # relative to the root
        self.line = line      # 1-based line of the first content line
        self.tag = tag
        self.text = text
        self.markers = markers  # list of (kind, argument)
        self.next = None      # the following block (expected stderr of `error`)
        self.consumed = False  # checked as part of the block before it

    def where(self):
        return f"{self.path}:{self.line}"

    def marker(self, kind):
        return [argument for k, argument in self.markers if k == kind]


def parse_marker(text, where):
    """Returns (kind, argument) of a marker's text; raises ValueError."""
    match = re.match(r"(skip-lines|skip|setup|file|error|output|same-as)\b\s*(.*)$", text)
    if not match:
        raise ValueError(f"{where}: unknown docs-test marker '{text}'")
    kind, rest = match.groups()
    if kind == "skip":
        reason = re.fullmatch(r"\((.+)\)", rest)
        if not reason:
            raise ValueError(f"{where}: 'skip' needs a reason in parentheses")
        return kind, reason.group(1)
    if kind == "skip-lines":
        parts = re.fullmatch(r"/(.+)/\s*\((.+)\)", rest)
        if not parts:
            raise ValueError(f"{where}: 'skip-lines' needs /REGEX/ (REASON)")
        return kind, (re.compile(parts.group(1)), parts.group(2))
    if kind == "output":
        if rest:
            raise ValueError(f"{where}: 'output' takes no argument")
        return kind, True
    if not rest:
        raise ValueError(f"{where}: '{kind}' needs an argument")
    if kind == "file" and not re.fullmatch(r"[\w.-]+", rest):
        raise ValueError(f"{where}: 'file' takes a plain file name, got '{rest}'")
    if kind == "error":
        name, _, arguments = rest.partition(" ")
        if not re.fullmatch(r"[\w.-]+", name):
            raise ValueError(f"{where}: 'error' takes a plain file name, got '{name}'")
        return kind, (name, arguments.split())
    return kind, rest


def parse_page(root, path):
    """The fenced blocks of one markdown page, with their markers."""
    rel = os.path.relpath(path, root)
    lines = open(path, encoding="utf-8").read().split("\n")
    blocks, pending, i = [], [], 0
    while i < len(lines):
        line = lines[i]
        marker = MARKER.match(line)
        if marker:
            pending.append(parse_marker(marker.group(1), f"{rel}:{i + 1}"))
            i += 1
            continue
        opening = FENCE_OPEN.match(line)
        if opening:
            indent, fence, tag = opening.groups()
            body, j = [], i + 1
            while j < len(lines) and not re.match(r"^\s*" + fence + r"\s*$", lines[j]):
                text = lines[j]
                body.append(text[len(indent):] if text.startswith(indent) else text.lstrip())
                j += 1
            if j == len(lines):
                raise ValueError(f"{rel}:{i + 1}: fenced block is not closed")
            block = Block(rel, i + 2, tag.lower(), "\n".join(body) + "\n", pending)
            if blocks:
                blocks[-1].next = block
            blocks.append(block)
            pending, i = [], j + 1
            continue
        if pending and line.strip():
            raise ValueError(f"{rel}:{i}: docs-test marker is not followed by a fenced block")
        i += 1
    if pending:
        raise ValueError(f"{rel}: docs-test marker at the end of the page")
    return blocks


def shell_commands(block):
    """(transcript?, logical commands) of an sh or console block."""
    lines = block.text.rstrip("\n").split("\n")
    transcript = block.tag not in SHELL_TAGS or any(l.startswith("$ ") for l in lines)
    commands, current = [], None
    for line in lines:
        if transcript:
            if line.startswith("$ "):
                current = line[2:]
            elif current is not None and current.endswith("\\"):
                current += "\n" + line
            else:
                continue
        else:
            current = line if current is None else current + "\n" + line
        if not current.endswith("\\"):
            commands.append(current)
            current = None
    if current is not None:
        commands.append(current)
    return transcript, [c for c in commands if c.strip() and not c.strip().startswith("#")]


class Page:
    """Runs one page's blocks in order and collects what happened."""

    def __init__(self, args, path, blocks):
        self.args, self.path, self.blocks = args, path, blocks
        self.log = []          # lines to print
        self.failed = 0
        self.counts = {"checked": 0, "skipped": 0, "fragment": 0, "text": 0}

    def note(self, block, status, detail=""):
        self.log.append(f"  {status:9} {block.where()} [{block.tag or 'text'}]"
                        + (f" {detail}" if detail else ""))

    def fail(self, block, message, output=""):
        self.failed += 1
        self.note(block, "FAIL", message)
        for line in output.rstrip().split("\n")[-40:]:
            if line:
                self.log.append("      | " + line)

    def run(self):
        with tempfile.TemporaryDirectory(prefix="attn-docs-") as work:
            self.work = work
            self.prepare(work)
            for block in self.blocks:
                start = time.monotonic()
                try:
                    self.check(block)
                except subprocess.TimeoutExpired as error:
                    self.fail(block, f"timed out after {error.timeout} s")
                if self.args.verbose and time.monotonic() - start > 5:
                    self.log.append(f"      ({time.monotonic() - start:.1f} s)")
        return self

    def prepare(self, work):
        # The tree as the docs see it: source entries linked, build/bin -> --bin.
        for entry in os.listdir(self.args.root):
            if entry.startswith(".") or entry.startswith("build"):
                continue
            os.symlink(os.path.join(self.args.root, entry), os.path.join(work, entry))
        os.makedirs(os.path.join(work, "build"))
        os.symlink(self.args.bin, os.path.join(work, "build", "bin"))
        os.makedirs(os.path.join(work, "home"))
        env = dict(os.environ)
        for name in ("ATTNC_CACHE_DIR", "ATTNC_CACHE_MAX_BYTES", "ATTNC_TUNING_DB",
                     "XDG_CACHE_HOME"):
            env.pop(name, None)
        env["HOME"] = os.path.join(work, "home")
        env["PATH"] = self.args.bin + os.pathsep + env.get("PATH", "")
        env["LC_ALL"] = "C"
        self.env = env

    def sh(self, script, timeout=None):
        return subprocess.run(["bash", "-c", script], cwd=self.work, env=self.env,
                              capture_output=True, text=True,
                              timeout=timeout or self.args.timeout)

    def check(self, block):
        if block.consumed:
            return
        skip = block.marker("skip")
        if skip:
            self.counts["skipped"] += 1
            self.note(block, "skip", f"({skip[0]})")
            return
        for path in block.marker("same-as"):
            if not self.same_as(block, path):
                return
        for command in block.marker("setup"):
            result = self.sh(command)
            if result.returncode:
                return self.fail(block, f"setup '{command}' exited with {result.returncode}",
                                 result.stdout + result.stderr)
        if block.tag == "mlir":
            return self.check_mlir(block)
        if block.tag in CXX_TAGS:
            return self.check_cxx(block)
        transcript, commands = shell_commands(block)
        if block.tag in SHELL_TAGS or (transcript and commands):
            return self.check_shell(block, commands)
        self.counts["text"] += 1
        if self.args.verbose:
            self.note(block, "text")

    def same_as(self, block, path):
        """Whether the block equals the file (its leading // lines left out)."""
        try:
            lines = open(os.path.join(self.args.root, path)).read().split("\n")
        except OSError as error:
            self.fail(block, f"same-as: {error}")
            return False
        while lines and lines[0].startswith("//"):
            lines.pop(0)
        if "\n".join(lines).strip() != block.text.strip():
            self.fail(block, f"differs from {path}; copy the file's text into the block")
            return False
        return True

    def expected_block(self, block, what):
        """The fenced block after `block`, which holds its expected output."""
        expected = block.next
        if expected is None or expected.tag not in ("", "text", "console"):
            self.fail(block, f"must be followed by a text block holding {what}")
            return None
        expected.consumed = True
        return expected

    def check_mlir(self, block):
        error_file = block.marker("error")
        named = block.marker("file")
        if error_file:
            return self.check_mlir_error(block, error_file[0])
        if "attn.kernel" not in block.text or "..." in block.text:
            if named:
                return self.fail(block, "a 'file' block must be a whole attn.kernel")
            self.counts["fragment"] += 1
            if self.args.verbose:
                self.note(block, "fragment")
            return
        name = named[0] if named else f"block-{block.line}.mlir"
        with open(os.path.join(self.work, name), "w") as spec:
            spec.write(block.text)
        result = subprocess.run([os.path.join(self.args.bin, "attnc"), name, "-o", name + ".ptx"],
                                cwd=self.work, env=self.env, capture_output=True, text=True,
                                timeout=self.args.timeout)
        self.counts["checked"] += 1
        if result.returncode:
            return self.fail(block, f"attnc exited with {result.returncode}", result.stderr)
        if ".entry" not in open(os.path.join(self.work, name + ".ptx")).read():
            return self.fail(block, "attnc wrote no kernel entry to the PTX")
        self.note(block, "ok", "compiled to PTX")

    def check_mlir_error(self, block, error):
        name, arguments = error
        expected = self.expected_block(block, "attnc's diagnostics")
        if expected is None:
            return
        with open(os.path.join(self.work, name), "w") as spec:
            spec.write(block.text)
        result = subprocess.run([os.path.join(self.args.bin, "attnc"), name, "-o", os.devnull]
                                + arguments, cwd=self.work, env=self.env, capture_output=True,
                                text=True, timeout=self.args.timeout)
        self.counts["checked"] += 1
        if result.returncode == 0:
            return self.fail(block, "attnc accepted a spec the docs say it rejects")
        if normalize(result.stderr) != normalize(expected.text):
            return self.fail(block, f"attnc's diagnostics differ from {expected.where()}; "
                                    "it printed:", result.stderr)
        self.note(block, "ok", "rejected with the diagnostics shown")

    def check_shell(self, block, commands):
        skipped = []
        for pattern, reason in block.marker("skip-lines"):
            skipped += [(c, reason) for c in commands if pattern.search(c)]
            commands = [c for c in commands if not pattern.search(c)]
        for command, reason in skipped:
            shown = command.splitlines()[0].split("  #")[0].strip()
            self.log.append(f"  {'skip':9} {block.where()} `{shown}` ({reason})")
        self.counts["skipped"] += len(skipped)
        if not commands:
            return
        script = ("set -e -o pipefail\n"
                  "trap 'echo \"docs-test: failed: $BASH_COMMAND\" >&2' ERR\n"
                  + "\n".join(commands) + "\n")
        expected = None
        if block.marker("output"):
            expected = self.expected_block(block, "the commands' output")
            if expected is None:
                return
        result = self.sh(script)
        self.counts["checked"] += 1
        if result.returncode:
            return self.fail(block, f"exited with {result.returncode}",
                             result.stdout + result.stderr)
        if expected and normalize(result.stdout) != normalize(expected.text):
            return self.fail(block, f"the output differs from {expected.where()}; it printed:",
                             result.stdout)
        self.note(block, "ok", f"{len(commands)} command(s)")

    def check_cxx(self, block):
        if "int main" in block.text:
            source = f'#line {block.line} "{block.path}"\n' + block.text
        else:
            top, body = [], []
            for line in block.text.split("\n"):
                hoist = line.startswith("#include") or line.startswith("using namespace")
                (top if hoist else body).append(line)
            source = (FRAGMENT_PRELUDE + "\n".join(top) + "\n" + PLACEHOLDERS
                      + "void docs_fragment() {\n"
                      + f'#line {block.line} "{block.path}"\n'
                      # Hoisted lines stay as blank lines, so line numbers hold.
                      + "\n".join("" if (l.startswith("#include") or
                                        l.startswith("using namespace")) else l
                                  for l in block.text.split("\n"))
                      + "\n}\n")
        path = os.path.join(self.work, f"block-{block.line}.cpp")
        with open(path, "w") as unit:
            unit.write(source)
        includes = [os.path.join(self.args.root, d)
                    for d in ("compiler/include", "runtime/include", "templates")]
        command = [self.args.cxx, "-std=c++17", "-fsyntax-only", "-Wall", "-Wno-unused"]
        command += [f"-I{d}" for d in includes + [self.args.cuda_include]] + [path]
        result = subprocess.run(command, cwd=self.work, capture_output=True, text=True,
                                timeout=self.args.timeout)
        self.counts["checked"] += 1
        if result.returncode:
            return self.fail(block, f"{os.path.basename(self.args.cxx)} -fsyntax-only failed",
                             result.stderr)
        self.note(block, "ok", "compiles (-fsyntax-only)")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--bin", required=True, help="the build's bin directory (attnc, ...)")
    parser.add_argument("--root", default=os.path.dirname(here), help="the source tree")
    parser.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    parser.add_argument("--cuda-include", default="/usr/local/cuda/include")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=int, default=120, help="seconds per block")
    parser.add_argument("--verbose", "-v", action="store_true", help="list every block")
    parser.add_argument("files", nargs="*", help="markdown pages (default: all)")
    args = parser.parse_args()
    args.root = os.path.abspath(args.root)
    args.bin = os.path.abspath(args.bin)
    if not os.access(os.path.join(args.bin, "attnc"), os.X_OK):
        print(f"check-docs: no attnc in {args.bin}", file=sys.stderr)
        return 1
    files = [os.path.abspath(f) for f in args.files]
    if not files:
        files = [os.path.join(args.root, "README.md")]
        for directory, _, names in sorted(os.walk(os.path.join(args.root, "docs"))):
            files += [os.path.join(directory, n) for n in sorted(names) if n.endswith(".md")]

    pages = []
    try:
        for path in files:
            pages.append(Page(args, os.path.relpath(path, args.root),
                              parse_page(args.root, path)))
    except ValueError as error:
        print(f"check-docs: {error}", file=sys.stderr)
        return 1

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        done = list(pool.map(Page.run, pages))
    totals = {key: sum(p.counts[key] for p in done) for key in done[0].counts}
    failed = sum(p.failed for p in done)
    for page in done:
        if page.log:
            print(f"{page.path}:")
            print("\n".join(page.log))
    print(f"check-docs: {len(done)} pages, {totals['checked']} blocks checked, "
          f"{failed} failed, {totals['skipped']} skipped (reasons above), "
          f"{totals['fragment']} mlir fragments and {totals['text']} text blocks not run, "
          f"{time.monotonic() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
