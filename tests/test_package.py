"""vitviz as an installed package: a wheel built from this checkout, installed into a temporary folder and
used from another directory, carries the default model, the dashboard and the `vitviz` command."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from vitviz.commands.app import streamlit_flags
from vitviz.commands.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel (no dependencies: the running environment has them; no network) and its install folder. Built from
    a copy of the checkout without its build/ folder, whose leftovers of moved modules would enter the wheel."""
    tmp = tmp_path_factory.mktemp("package")
    skip = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", ".pytest_cache", "runs")
    source = Path(shutil.copytree(ROOT, tmp / "source", ignore=skip))
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = (tmp / "dist").glob("vitviz-*.whl")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(tmp / "site"), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    (tmp / "elsewhere").mkdir()
    return wheel, tmp / "site", tmp / "elsewhere"


def run_installed(site: Path, cwd: Path, *command: str) -> subprocess.CompletedProcess:
    """A command with only the installed copy of vitviz on the path (never this checkout)."""
    env = os.environ | {"PYTHONPATH": str(site)}
    env.pop("VITVIZ_DEFAULT_CHECKPOINT", None)
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def test_wheel_carries_the_default_model_the_dashboard_and_its_settings(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "vitviz/checkpoints/default.pt",
        "vitviz/checkpoints/README.md",
        "vitviz_dashboard/app.py",
        "vitviz_dashboard/streamlit_config.toml",
        "vitviz_dashboard/tabs/overview.py",
        "vitviz_dashboard/dataset/page.py",
        "vitviz_dashboard/examples/coffee.jpg",
        "vitviz_dashboard/examples/SOURCES.md",
    } <= names
    assert not any(name.startswith(("tests/", "bench/")) for name in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "vitviz = vitviz.commands.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_installed_package_loads_the_default_from_another_directory(installed):
    _, site, elsewhere = installed
    code = (
        "import vitviz, vitviz.loading.specs; m = vitviz.load_model('default'); "
        "print(vitviz.__file__); print(vitviz.loading.specs.DEFAULT_CHECKPOINT); "
        "print(m.config.grid_size, len(m.class_names))"
    )
    result = run_installed(site, elsewhere, sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    module, checkpoint, shape = result.stdout.splitlines()
    assert Path(module).is_relative_to(site) and Path(checkpoint).is_relative_to(site)
    assert shape == "(8, 8) 10"


@pytest.mark.slow
def test_installed_console_command(installed):
    _, site, elsewhere = installed
    script = site / "bin" / "vitviz"
    assert script.is_file()
    result = run_installed(site, elsewhere, sys.executable, str(script), "--help")
    assert result.returncode == 0, result.stderr
    for command in COMMANDS:
        assert f"  {command} " in result.stdout
    result = run_installed(site, elsewhere, sys.executable, str(script), "evaluate", "--help")
    assert result.returncode == 0 and "--val-dir" in result.stdout
    result = run_installed(site, elsewhere, sys.executable, "-m", "vitviz", "benchmark", "--help")
    assert result.returncode == 0 and "--sanity" in result.stdout


def test_installed_app_command_starts_the_server(installed):
    _, site, elsewhere = installed
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = os.environ | {"PYTHONPATH": str(site)}
    command = [
        sys.executable,
        str(site / "bin" / "vitviz"),
        "app",
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
    ]
    server = subprocess.Popen(command, cwd=elsewhere, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline, answer = time.monotonic() + 60, ""
        while time.monotonic() < deadline and server.poll() is None and answer != "ok":
            try:
                answer = urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read().decode()
            except OSError:
                time.sleep(0.5)
        assert answer == "ok", server.stdout.read1().decode() if server.poll() is not None else "no answer in 60 s"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_unknown_command_is_named(capsys):
    assert main(["serve"]) == 2
    assert "unknown command 'serve'" in capsys.readouterr().err
    assert main([]) == 0 and "usage: vitviz <command>" in capsys.readouterr().out


def test_app_passes_the_dashboard_settings_then_the_users_flags(monkeypatch):
    started = []

    def execv(path, command):  # the real one never returns
        started.append(command)
        raise SystemExit(0)

    monkeypatch.setattr("vitviz.commands.app.os.execv", execv)
    monkeypatch.setattr("vitviz.commands.app.os.name", "posix")
    with pytest.raises(SystemExit):
        main(["app", "--server.port", "9999"])
    (command,) = started
    assert command[1:4] == ["-m", "streamlit", "run"] and Path(command[4]) == ROOT / "vitviz_dashboard" / "app.py"
    assert "--server.maxUploadSize=50" in command and command[-2:] == ["--server.port", "9999"]
    # the checkout's .streamlit/config.toml is the same file, so `streamlit run app.py` has the same settings
    assert (ROOT / ".streamlit" / "config.toml").resolve() == ROOT / "vitviz_dashboard" / "streamlit_config.toml"
    assert streamlit_flags()[0] == "--server.maxUploadSize=50"


BENCH_SCRIPTS = sorted(p.name for p in (ROOT / "bench").glob("*.py") if p.name != "common.py")

# Runs every bench script's `--help` in one fresh Python process, one after the other, each as `python bench/<script>`
# runs it (as __main__, bench/ first on sys.path, so `import common` finds bench/common.py), and prints each one's
# exit status and output as JSON: one torch import for all of them instead of one per script.
HELP_RUNNER = """
import contextlib, io, json, runpy, sys
results = {}
for script in sys.argv[1:]:
    out, err, status = io.StringIO(), io.StringIO(), 0
    sys.argv, sys.path[0] = [f"bench/{script}", "--help"], "bench"
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path(f"bench/{script}", run_name="__main__")
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except Exception as error:  # a script that fails to start: its error, as its own process would print it
            status, err = 1, io.StringIO(f"{type(error).__name__}: {error}")
    results[script] = {"status": status, "stdout": out.getvalue(), "stderr": err.getvalue()}
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def bench_help() -> dict[str, dict]:
    """Every bench script's `--help` from the repository root, with no PYTHONPATH: the installed package."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", HELP_RUNNER, *BENCH_SCRIPTS],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("script", BENCH_SCRIPTS)
def test_bench_scripts_start_as_their_readme_says(bench_help, script):
    """`python bench/<script> --help` from the repository root, with no PYTHONPATH (one process runs them all)."""
    result = bench_help[script]
    assert result["status"] == 0, result["stderr"]
    assert "--out" in result["stdout"]
    assert f".venv/bin/python bench/{script}" in (ROOT / "bench" / "README.md").read_text()
