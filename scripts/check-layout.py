#!/usr/bin/env python3
"""The tree's layout rules that grep cannot check; scripts/check-layers.sh runs it.

1. No file-level import cycle in src/. Each `use` (grouped trees included) and each
   `crate::`/`super::`/`self::` path in code is resolved to the file that defines the
   name, following re-exports, so `use super::Status` in election/run.rs points at
   election/status.rs, not at the mod.rs that re-exports it. A module's `pub use` of its
   own descendants is a re-export, not a dependency. Each strongly connected component
   of more than one file is printed as a cycle.
2. No source file over 500 lines, tests apart: files under a `tests/` folder and files
   named tests.rs do not count, and in other files the lines from the first inline
   `#[cfg(test)] mod … {` on do not count.
3. README.md under 12 KB (12,000 bytes).
4. ARCHITECTURE.md names every source file of src/ (tests apart), and no row of its
   tables is over 200 characters. A backticked `src/…` path names a file, or a folder
   (`src/x/`, which names its mod.rs); a backticked name without a folder in the same
   line is in the folder of the `src/` path before it in that line.

Prints every offender and exits 1 if any rule is broken.
"""

import os
import re
import sys

MAX_LINES = 500
MAX_README_BYTES = 12_000
MAX_ROW_CHARS = 200

TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|::|[{}();,*=<>#\[\]!]|\S")
ITEM = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+|const\s+|unsafe\s+|extern\s+\"C\"\s+)*"
    r"(?:fn|struct|enum|trait|type|const|static|union|mod)\s+([A-Za-z_][A-Za-z0-9_]*)",
    re.M,
)
MACRO = re.compile(r"macro_rules!\s*([A-Za-z_][A-Za-z0-9_]*)")


def strip(text):
    """The source without comments, string and char literals (lifetimes kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
        elif re.match(r'b?r#*"', text[i:i + 40]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'b?r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"' or (c == "b" and text.startswith('b"', i) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_"))):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            if m:
                out.append("' '")
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Module:
    def __init__(self, path, file):
        self.path = path  # ("store", "url")
        self.file = file
        self.text = strip(open(file, encoding="utf-8").read())
        self.items = set(ITEM.findall(self.text)) | set(MACRO.findall(self.text))
        self.uses = []  # (is_pub, [segments], alias), for the file's top-level scope
        self.code_paths = []  # (scope, [segments]) of paths in code and in nested scopes' uses
        self.parse()

    def parse(self):
        tokens = TOKEN.findall(self.text)
        inline = []  # (name, depth at which its body opened) of the inline `mod name {` around
        i, depth = 0, 0
        while i < len(tokens):
            t = tokens[i]
            scope = self.path + tuple(name for name, _ in inline)
            if t == "{":
                depth += 1
                if i >= 2 and tokens[i - 2] == "mod":
                    inline.append((tokens[i - 1], depth))
            elif t == "}":
                if inline and inline[-1][1] == depth:
                    inline.pop()
                depth -= 1
            elif t == "use" and (i == 0 or tokens[i - 1] != "::"):
                is_pub = i > 0 and tokens[i - 1] in ("pub", ")")
                j = tokens.index(";", i)
                for segments, alias in expand(tokens[i + 1:j]):
                    if depth == 0:
                        self.uses.append((is_pub, segments, alias))
                    else:
                        self.code_paths.append((scope, segments))
                i = j
            elif re.match(r"[A-Za-z_]", t) and i + 2 < len(tokens) and tokens[i + 1] == "::" \
                    and re.match(r"[A-Za-z_*]", tokens[i + 2]) and (i == 0 or tokens[i - 1] not in ("::", "$")):
                # `crate::a::b`, `super::a`, `self::a`, and `child::a` (kept if `child` is a
                # module file under this one).
                segments, j = [t], i + 1
                while j + 1 < len(tokens) and tokens[j] == "::" and re.match(r"[A-Za-z_]", tokens[j + 1]):
                    if tokens[j + 1] in ("super", "self") and segments[-1] not in ("super", "self"):
                        break
                    segments.append(tokens[j + 1])
                    j += 2
                if segments[-1] in ("super", "self", "crate"):
                    segments.append("*")
                self.code_paths.append((scope, segments))
                i = j - 1
            i += 1


def expand(tokens):
    """The paths of one use tree: `a::{b, c::d as e, f::*}` -> [a, b], [a, c, d] (e), [a, f, *]."""
    paths = []

    def walk(k, prefix):
        segments = list(prefix)
        while k < len(tokens):
            t = tokens[k]
            if t == "{":
                k += 1
                while tokens[k] != "}":
                    k = walk(k, segments)
                    if tokens[k] == ",":
                        k += 1
                return k + 1
            if t == "::":
                k += 1
            elif t == "*":
                paths.append((segments + ["*"], None))
                return k + 1
            elif t in (",", "}"):
                if segments and segments[-1] == "self":
                    segments = segments[:-1]
                paths.append((segments, None))
                return k
            elif t == "as":
                paths.append((segments, tokens[k + 1]))
                return k + 2
            else:
                segments.append(t)
                k += 1
        if segments and segments[-1] == "self":
            segments = segments[:-1]
        paths.append((segments, None))
        return k

    if tokens and tokens[0] == "::":
        tokens = tokens[1:]
    walk(0, [])
    return [(p, a) for p, a in paths if p]


def load(src):
    modules = {}
    for root, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            file = os.path.join(root, name)
            rel = os.path.relpath(file, src)[:-3].split(os.sep)
            if rel == ["main"]:
                continue  # the binary, a crate of its own
            if rel == ["lib"]:
                rel = []
            elif rel[-1] == "mod":
                rel = rel[:-1]
            modules[tuple(rel)] = Module(tuple(rel), file)
    return modules


class Resolver:
    def __init__(self, modules):
        self.modules = modules

    def absolute(self, module, segments):
        """Segments relative to `module` made absolute, or None for another crate."""
        path = list(module)
        head = segments[0]
        if head == "crate":
            return list(segments[1:]) if len(segments) > 1 else ["*"]
        if head in ("super", "self"):
            k = 0
            while k < len(segments) and segments[k] in ("super", "self"):
                if segments[k] == "super":
                    path = path[:-1]
                k += 1
            return path + list(segments[k:] or ["*"])
        if tuple(path + [head]) in self.modules:
            return path + list(segments)
        return None

    def file_of(self, absolute, seen=()):
        """The file that defines the name at `absolute`, following re-exports."""
        module = ()
        for k, segment in enumerate(absolute):
            if segment == "*":
                return self.modules[module].file
            child = module + (segment,)
            if child in self.modules:
                module = child
                continue
            here = self.modules[module]
            if segment in here.items:
                return here.file
            for _, target, alias in here.uses:
                name = alias or target[-1]
                if name == segment and (module, segment) not in seen:
                    resolved = self.absolute(module, target)
                    if resolved is None:
                        return here.file
                    return self.file_of(resolved + list(absolute[k + 1:]), seen + ((module, segment),))
            for _, target, _ in here.uses:
                if target[-1] == "*":
                    resolved = self.absolute(module, target[:-1])
                    if resolved is not None and tuple(resolved) in self.modules \
                            and (module, "*" + segment) not in seen:
                        inner = self.file_of(resolved + [segment], seen + ((module, "*" + segment),))
                        if inner != self.modules[tuple(resolved)].file:
                            return inner
            return here.file
        return self.modules[module].file


def edges(modules):
    resolver = Resolver(modules)
    graph = {m.file: set() for m in modules.values()}
    for module in modules.values():
        paths = [(is_pub, module.path, s) for is_pub, s, _ in module.uses]
        paths += [(False, scope, s) for scope, s in module.code_paths]
        for is_pub, scope, segments in paths:
            absolute = resolver.absolute(scope, segments)
            if absolute is None:
                continue
            # A module re-exporting its own descendants only names them again.
            if is_pub and tuple(absolute[:len(module.path)]) == module.path \
                    and len(absolute) > len(module.path) \
                    and module.path + (absolute[len(module.path)],) in modules:
                continue
            target = resolver.file_of(absolute)
            if target != module.file:
                graph[module.file].add(target)
    return graph


def cycles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def shortest_cycle(graph, component):
    """One shortest circle through the component's first file, to print."""
    start, members = component[0], set(component)
    previous, queue = {start: None}, [start]
    for v in queue:
        for w in sorted(graph[v] & members):
            if w == start:
                path = [v]
                while previous[path[-1]] is not None:
                    path.append(previous[path[-1]])
                return list(reversed(path)) + [start]
            if w not in previous:
                previous[w] = v
                queue.append(w)
    return component


def counted_lines(file):
    lines = open(file, encoding="utf-8").read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for k, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]":
            rest = [x for x in lines[k + 1:k + 4] if not x.strip().startswith("#[")]
            if rest and re.match(r"\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", rest[0]):
                return k
    return len(lines)


def architecture_names(doc):
    """The files and folders ARCHITECTURE.md names (rule 4), and its rows that are too long."""
    names, long_rows = set(), []
    for number, line in enumerate(doc.splitlines(), 1):
        if line.startswith("|") and len(line) > MAX_ROW_CHARS:
            long_rows.append((number, len(line)))
        base = None
        for token in re.findall(r"`([^`]+)`", line):
            if token.startswith("src/"):
                names.add(token.rstrip("/"))
                base = token.rstrip("/") if token.endswith("/") else os.path.dirname(token)
            elif base and (token.endswith(".rs") or token.endswith("/")):
                names.add(os.path.join(base, token.rstrip("/")))
    return names, long_rows


def unnamed_files(names):
    """The source files of src/ that ARCHITECTURE.md does not name (tests apart)."""
    missing = []
    for root, _, files in os.walk("src"):
        for name in files:
            file = os.path.join(root, name)
            if not name.endswith(".rs") or name == "tests.rs" or "tests" in file.split(os.sep)[:-1]:
                continue
            if file in names or (name == "mod.rs" and root in names):
                continue
            missing.append(file)
    return sorted(missing)


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    failed = False

    graph = edges(load("src"))
    found = cycles(graph)
    if found:
        failed = True
        print("layout check failed: import cycles among files in src/:", file=sys.stderr)
        for component in found:
            circle = shortest_cycle(graph, component)
            print("  " + " -> ".join(circle), file=sys.stderr)
            if len(component) > len(circle) - 1:
                print("    (the component: " + ", ".join(component) + ")", file=sys.stderr)

    long_files = []
    for root, _, files in os.walk("src"):
        for name in files:
            file = os.path.join(root, name)
            if not name.endswith(".rs") or name == "tests.rs" or "tests" in file.split(os.sep)[:-1]:
                continue
            count = counted_lines(file)
            if count > MAX_LINES:
                long_files.append((count, file))
    if long_files:
        failed = True
        print(f"layout check failed: source files over {MAX_LINES} lines (tests apart):", file=sys.stderr)
        for count, file in sorted(long_files, reverse=True):
            print(f"  {file}: {count} lines", file=sys.stderr)

    size = os.path.getsize("README.md")
    if size >= MAX_README_BYTES:
        failed = True
        print(f"layout check failed: README.md is {size} bytes, the limit is {MAX_README_BYTES}; "
              "move manual sections into docs/", file=sys.stderr)

    with open("ARCHITECTURE.md", encoding="utf-8") as doc:
        names, long_rows = architecture_names(doc.read())
    missing = unnamed_files(names)
    if missing:
        failed = True
        print("layout check failed: ARCHITECTURE.md names no row for these files of src/:",
              file=sys.stderr)
        for file in missing:
            print(f"  {file}", file=sys.stderr)
    if long_rows:
        failed = True
        print(f"layout check failed: ARCHITECTURE.md rows over {MAX_ROW_CHARS} characters:",
              file=sys.stderr)
        for number, length in long_rows:
            print(f"  line {number}: {length} characters", file=sys.stderr)

    if failed:
        sys.exit(1)
    print(f"layout check passed: no import cycle among {len(graph)} files in src/, none over "
          f"{MAX_LINES} lines, README.md {size} bytes, ARCHITECTURE.md names every file")


if __name__ == "__main__":
    main()
