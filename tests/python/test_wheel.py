"""The Python package ships as an abi3 wheel that installs without Rust.

`make python-package` builds the wheel into $(TARGET_DIR)/wheels; this test installs that
wheel (and its runtime dependencies, as binary wheels only) into a fresh virtual environment
whose PATH holds no `cargo` or `rustc`, then runs the README's Python one-liner in it against
a real `latticekv local`. pip fetches the dependencies from PyPI, so this test needs it (or
a pip configured with a mirror).

The wheel is $LATTICEKV_WHEEL if set, else the one `latticekv-*.whl` in $LATTICEKV_WHEEL_DIR
(set by `make python-test`), $CARGO_TARGET_DIR/wheels or target/wheels.
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import venv
import zipfile

from conftest import ROOT
from docs_harness import blocks, matches

# Tags of an abi3 wheel for CPython >= 3.9 on Linux: `cp39-abi3-` then a platform,
# `manylinux_2_34_x86_64` (maturin's audit) or the plain `linux_x86_64`.
ABI3_TAG = re.compile(r"cp39-abi3-(manylinux_\d+_\d+_\w+|manylinux\d+_\w+|linux_\w+)")
PIP_TIMEOUT_S = 300
RUN_TIMEOUT_S = 60


def wheel() -> pathlib.Path:
    """The wheel under test; fails (never skips) when there is none: make test builds one."""
    explicit = os.environ.get("LATTICEKV_WHEEL")
    if explicit:
        path = pathlib.Path(explicit)
        assert path.is_file(), f"LATTICEKV_WHEEL={explicit} is not a file"
        return path
    target = os.environ.get("CARGO_TARGET_DIR")
    directory = pathlib.Path(
        os.environ.get("LATTICEKV_WHEEL_DIR")
        or (pathlib.Path(target) / "wheels" if target else ROOT / "target" / "wheels"))
    found = sorted(directory.glob("latticekv-*.whl"))
    assert found, (f"no latticekv-*.whl in {directory}: build it with `make python-package` "
                   "(or set LATTICEKV_WHEEL)")
    assert len(found) == 1, (f"several wheels in {directory}, which one is fresh is unclear: "
                             f"{[p.name for p in found]} (make python-package removes old ones)")
    return found[0]


def wheel_tags(path: pathlib.Path) -> list[str]:
    """The `Tag:` lines of the wheel's .dist-info/WHEEL file."""
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/WHEEL", n)]
        assert len(names) == 1, f"{path.name}: expected one .dist-info/WHEEL, got {names}"
        text = z.read(names[0]).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines()
            if line.startswith("Tag:")]


def readme_one_liner():
    """The README's console block that imports latticekv and connects to a local node."""
    found = [b for b in blocks(ROOT / "README.md")
             if b.kind == "console" and "import latticekv;" in b.text
             and "latticekv.connect(" in b.text]
    assert len(found) == 1, f"expected one Python one-liner in README.md, found {len(found)}"
    return found[0]


def rust_free_env(venv_dir: pathlib.Path) -> dict[str, str]:
    """The environment of a user without Rust: the venv's bin and the system's, nothing
    of rustup or cargo."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CARGO", "RUSTUP", "RUSTC", "MATURIN", "PYO3"))
           and k not in ("PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(venv_dir / "bin"), "/usr/bin", "/bin"])
    env["VIRTUAL_ENV"] = str(venv_dir)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def test_wheel_is_abi3():
    path = wheel()
    name_tag = "-".join(path.stem.split("-")[2:])
    assert ABI3_TAG.fullmatch(name_tag), f"{path.name}: not an abi3 wheel for cp39+"
    tags = wheel_tags(path)
    assert tags, f"{path.name}: its WHEEL file has no Tag"
    for tag in tags:
        assert ABI3_TAG.fullmatch(tag), f"{path.name}: WHEEL tag {tag!r} is not abi3 for cp39+"


def test_wheel_installs_without_rust_and_runs_the_readme(tmp_path, node):
    path = wheel()
    venv_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(venv_dir)
    env = rust_free_env(venv_dir)
    for tool in ("cargo", "rustc"):
        assert shutil.which(tool, path=env["PATH"]) is None, \
            f"{tool} is on the test's reduced PATH {env['PATH']}"
    python = str(venv_dir / "bin" / "python")

    # The wheel and its dependencies (cloudpickle, from PyPI), wheels only: nothing is
    # built, so nothing here could have needed a compiler.
    install = subprocess.run(
        [python, "-m", "pip", "install", "--only-binary", ":all:", str(path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    assert install.returncode == 0, f"pip install failed:\n{install.stdout}\n{install.stderr}"

    # What is imported is the installed wheel, not python/ of the checkout.
    where = subprocess.run(
        [python, "-c", "import latticekv, latticekv._native as n; print(n.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert where.returncode == 0, where.stderr
    assert pathlib.Path(where.stdout.strip()).is_relative_to(venv_dir), where.stdout

    block = readme_one_liner()
    lines = block.text.splitlines()
    assert lines[0].startswith("$ python "), lines[0]
    command = lines[0][2:].replace("127.0.0.1:7700", node.native)
    expected = [line.rstrip() for line in lines[1:]]
    ran = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    got = [line.rstrip() for line in (ran.stdout + ran.stderr).splitlines()]
    assert ran.returncode == 0 and matches(expected, got), (
        f"README.md:{block.line}: {command}\n--- the README says\n" + "\n".join(expected)
        + "\n--- it printed\n" + "\n".join(got))
