#!/usr/bin/env python3
"""Checks that every #include between trun's modules goes down a layer.

The layers are the table under "Modules in layers" in docs/design.md (one
row per layer, lowest first; the modules of a row in backticks), so the
document and the check cannot drift apart. A module may include its own
headers and those of any module of a lower layer; an include of a module
of its own layer or of a higher one fails, naming the file, the line and
both modules, and says so when the two modules include each other (a
circle). Every folder under src/ must be in the table, so that a new module
is placed on purpose.

Usage: scripts/check-layers.py [--root DIR]   (DIR: the repository; default
the one this script is in); scripts/check-layers.py --self-test.
Standard library only; reads the sources once (well under a second).
"""

import argparse
import pathlib
import re
import sys
import tempfile

TABLE_HEADING = "## Modules in layers"
ROW = re.compile(r"^\|\s*(\d+)\s*\|([^|]*)\|")
MODULE = re.compile(r"`([a-z_]+)/?`")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def read_layers(design: pathlib.Path) -> dict:
    """Module -> layer number, from the table under TABLE_HEADING."""
    layers = {}
    in_section = False
    for line in design.read_text().splitlines():
        if line.startswith("## "):
            in_section = line.strip() == TABLE_HEADING
            continue
        match = ROW.match(line) if in_section else None
        if not match:
            continue
        for module in MODULE.findall(match.group(2)):
            layers[module] = int(match.group(1))
    return layers


def find_includes(src: pathlib.Path) -> list:
    """(file, line number, including module, included module) for every
    quoted include of another module's header."""
    found = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cc") or not path.is_file():
            continue
        module = path.relative_to(src).parts[0]
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            match = INCLUDE.match(line)
            if match and match.group(1) != module:
                found.append((path, number, module, match.group(1)))
    return found


def check(root: pathlib.Path) -> list:
    """Every problem, one message each; empty when the layers hold."""
    design = root / "docs" / "design.md"
    src = root / "src"
    layers = read_layers(design)
    if not layers:
        return [f"{design}: no table under '{TABLE_HEADING}' (rows: | LAYER | `module`, ... |)"]
    problems = []
    folders = sorted(p.name for p in src.iterdir() if p.is_dir())
    for folder in folders:
        if folder not in layers:
            problems.append(
                f"src/{folder}/ is in no layer: add it to the table under "
                f"'{TABLE_HEADING}' in docs/design.md")
    for module in sorted(set(layers) - set(folders)):
        problems.append(
            f"docs/design.md's layer table names `{module}`, but src/{module}/ does not exist: "
            "drop it from the table")
    includes = find_includes(src)
    edges = {}
    for path, number, module, target in includes:
        edges.setdefault((module, target), (path, number))
    for path, number, module, target in includes:
        where = f"{path.relative_to(root)}:{number}"
        if target not in layers:
            if target in folders or module not in layers:
                continue  # reported above, as a folder in no layer
            problems.append(f'{where}: {module} includes "{target}/...", which is no module under src/')
            continue
        if module not in layers or layers[target] < layers[module]:
            continue
        how = ("a module of the same layer" if layers[target] == layers[module]
               else "a module of a higher layer")
        message = (f"{where}: {module} (layer {layers[module]}) includes {target} "
                   f"(layer {layers[target]}), {how}")
        back = edges.get((target, module))
        if back:
            message += (f"; {target} includes {module} too ({back[0].relative_to(root)}:{back[1]}): "
                        "a circle")
        problems.append(message + "; move what both need to a lower layer, or the module up "
                        "(docs/design.md, 'Modules in layers')")
    return problems


def self_test() -> None:
    """The check on a small tree that breaks every rule once, and on one
    that keeps them."""
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "docs").mkdir()
        (root / "docs" / "design.md").write_text(
            "# x\n## Modules in layers\n| layer | modules |\n| --- | --- |\n"
            "| 0 | `base` |\n| 1 | `low`, `peer` |\n| 2 | `high` |\n## Next\n| 3 | `ignored` |\n")
        for module, text in {
                "base": '#include "base/a.h"\n',
                "low": '#include "base/a.h"\n',
                "peer": '#include "base/a.h"\n',
                "high": '#include "low/a.h"\n#include "peer/a.h"\n',
        }.items():
            (root / "src" / module).mkdir(parents=True)
            (root / "src" / module / "a.cc").write_text(text)
        assert check(root) == [], check(root)

        (root / "src" / "base" / "b.h").write_text('#include <vector>\n#include "high/a.h"\n')
        (root / "src" / "low" / "b.cc").write_text('#include "peer/a.h"\n')
        (root / "src" / "peer" / "b.cc").write_text('#include "low/a.h"\n')
        (root / "src" / "stray").mkdir()
        got = check(root)
        expected = [
            "src/stray/ is in no layer",
            "src/base/b.h:2: base (layer 0) includes high (layer 2), a module of a higher layer",
            "src/low/b.cc:1: low (layer 1) includes peer (layer 1), a module of the same layer; "
            "peer includes low too (src/peer/b.cc:1): a circle",
            "src/peer/b.cc:1: peer (layer 1) includes low (layer 1), a module of the same layer; "
            "low includes peer too (src/low/b.cc:1): a circle",
        ]
        assert len(got) == len(expected), got
        for want, message in zip(expected, got):
            assert message.startswith(want), (want, message)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent.parent)
    parser.add_argument("--self-test", action="store_true",
                        help="check the checker on a made-up tree")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        print("check-layers: self-test passed")
        return 0
    problems = check(args.root)
    for problem in problems:
        print(f"check-layers: {problem}", file=sys.stderr)
    if problems:
        return 1
    print("check-layers: every include goes down a layer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
