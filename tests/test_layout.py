"""The layout rules, checked by tools rather than by memory: the import layers
(import-linter's contracts in pyproject.toml), no function over 80 lines and no module over 500
outside tests, no code in the runtime packages that nothing uses (vulture), and tests/ in rooms
(docs/design.md, "Tests")."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from prereqs import requires

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
REPO_WIDE_TESTS = {"test_layout.py", "test_prereqs.py"}  # the only test files at the top of tests/
BIN = Path(sys.executable).parent
CODE = ("chat", "feedback", "store", "trainer", "evaluator", "deploy", "bench", "tools")
# Modules that are data written as Python (the corpus's topic tables, the PII test set's value
# pools): long by content, not by logic.
DATA_MODULES = {"tools/data/corpus_source.py", "tools/data/gold_topics.py", "tools/data/make_pii_testset.py"}
MAX_FUNCTION_LINES, MAX_MODULE_LINES = 80, 500


def _python_files():
    for package in CODE:
        yield from sorted((REPO / package).rglob("*.py"))


def test_import_layers_hold():
    result = subprocess.run([str(BIN / "lint-imports")], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def test_no_function_over_80_lines_and_no_module_over_500():
    long_functions, long_modules = [], []
    for path in _python_files():
        rel = path.relative_to(REPO).as_posix()
        source = path.read_text(encoding="utf-8")
        if source.count("\n") > MAX_MODULE_LINES and rel not in DATA_MODULES:
            long_modules.append(f"{rel}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    assert not long_modules, "split these modules: " + "; ".join(long_modules)
    assert not long_functions, "split these functions: " + "; ".join(long_functions)


@requires((BIN / "vulture").exists(), f"vulture is a test dependency, not in {BIN} (pip install -e .[test])")
def test_no_unused_code_in_the_runtime_packages():
    # 80 % confidence: unused imports, functions, classes and variables that nothing in the repo
    # (tests and bench included) names. Lower confidences list every FastAPI route and Typer
    # command, which the frameworks call by decoration.
    result = subprocess.run([str(BIN / "vulture"), "chat", "feedback", "store", "trainer", "evaluator", "deploy", "tests",
                             "bench", "--min-confidence", "80",
                             # parameters an interface dictates: spaCy's process_batch, signal handlers
                             "--ignore-names", "as_tuples,signum"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module} | {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}


def test_tests_sit_in_rooms_and_helpers_hold_no_tests():
    # Rooms and sub-rooms are plain folders (no __init__.py, so tests/store never shadows the store
    # package), which makes pytest import each test file by its bare name: names must differ across
    # rooms, and a test module may import another test module of its own room only.
    test_files = sorted(TESTS.rglob("test_*.py"))
    assert not list(TESTS.rglob("__init__.py")), "tests/ and its rooms are plain folders: remove the __init__.py"
    by_name: dict[str, list[str]] = {}
    for path in test_files:
        by_name.setdefault(path.stem, []).append(path.relative_to(TESTS).as_posix())
    same = [paths for paths in by_name.values() if len(paths) > 1]
    assert not same, f"test file names must differ across rooms: {same}"
    # A room is one level deep; a large one may split into sub-rooms named after its package's own
    # folders (tests/deploy/release/ for deploy/release/), one level more and no further.
    deep = [path.relative_to(TESTS).as_posix() for path in test_files
            if len(rooms := path.relative_to(TESTS).parts[:-1]) > 2
            or (len(rooms) == 2 and not (REPO / rooms[0] / rooms[1]).is_dir())]
    assert not deep, f"rooms are one level deep, sub-rooms mirror a folder of their room's package: {deep}"
    loose = sorted({path.name for path in TESTS.glob("test_*.py")} - REPO_WIDE_TESTS)
    assert not loose, f"put these in the room of the package they test (tests/<package>/): {loose}"
    cross = [f"{path.relative_to(TESTS)} imports {name}" for path in test_files for name in _imported_modules(path)
             if name in by_name and not (path.parent / f"{name}.py").exists()]
    assert not cross, "move what rooms share into a helper at the top of tests/: " + "; ".join(cross)
    helpers = [path for path in TESTS.glob("*.py") if not path.name.startswith("test_") and path.name != "conftest.py"]
    collectable = [f"{path.name}: {node.name}" for path in helpers for node in ast.parse(path.read_text()).body
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                   and node.name.lower().startswith("test")]
    assert not collectable, "a helper module would hand these to pytest as tests: " + "; ".join(collectable)
