"""The package stands alone: ``python -m build`` makes an sdist and, from it, a wheel; the
wheel carries ``spark_zmq`` (with ``py.typed``), ``pyspark_zmq`` and the ``spark-zmq``
command, and installed into a fresh virtual environment outside the checkout it runs
``spark-zmq --version``, imports from its own copy, and runs the README's first stream
(its Spark driver and Python workers on the venv's Python, fed by the venv's ``spark-zmq
produce``): ``format("zmq")`` found through the wheel's ``pyspark_zmq`` alone.

Why from the sdist: ``python -m build`` builds the wheel from the unpacked sdist, so a file
the sdist leaves out fails here, not on a user's machine. The venv sees the interpreter's
site-packages (``--system-site-packages``) for the dependencies (pyspark alone is hundreds
of MB to download), and ``pip check`` says that what the wheel requires is satisfied; the
wheel's own copy comes first on its path, which the test checks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
from zmqtest import free_ports

# spark: the README's stream starts a Spark application (one at a time, with the others)
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(420)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args: str, cwd: str, timeout: float = 240) -> subprocess.CompletedProcess:
    result = subprocess.run(
        list(args),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
    )
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _declared_version() -> str:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        found = re.search(r'^version\s*=\s*"([^"]+)"', f.read(), re.MULTILINE)
    assert found is not None
    return found.group(1)


def test_the_wheel_built_from_the_sdist_installs_and_runs_outside_the_checkout(tmp_path):
    # a copy of the working tree's files (tracked and new, not ignored): the build writes
    # egg-info and build/ where it runs, never into the checkout others are using
    try:
        listed = (
            subprocess.run(
                ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                cwd=ROOT,
                capture_output=True,
                check=True,
                timeout=60,
            )
            .stdout.decode()
            .split("\0")
        )
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("the checkout is not a git work tree (its files are listed with git ls-files)")
    source = tmp_path / "source"
    for name in filter(None, listed):
        if name.startswith(("tests/", "notebooks/", "bench/")) or not os.path.isfile(os.path.join(ROOT, name)):
            continue
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.join(ROOT, name), source / name)
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--outdir", str(dist), str(source), cwd=str(tmp_path))
    version = _declared_version()
    wheels = list(dist.glob(f"spark_zmq-{version}-*.whl"))
    sdists = list(dist.glob(f"spark_zmq-{version}.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, os.listdir(dist)

    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
        info = f"spark_zmq-{version}.dist-info"
        metadata = wheel.read(f"{info}/METADATA").decode()
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    for needed in (
        "spark_zmq/__init__.py",
        "spark_zmq/py.typed",
        "spark_zmq/cli/__init__.py",
        "spark_zmq/patterns/wires/zmtp/__init__.py",
        "spark_zmq/metrics.py",
        "pyspark_zmq/__init__.py",
    ):
        assert needed in names, needed
    assert not [n for n in names if n.startswith(("tests/", "jobs/", "bench/"))]
    assert "spark-zmq = spark_zmq.cli:main" in entry_points
    assert f"Version: {version}" in metadata and "Requires-Dist: pyzmq" in metadata
    assert "Provides-Extra: metrics" in metadata

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--system-site-packages", str(venv), cwd=str(tmp_path))
    python = str(venv / "bin" / "python")
    _run(python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheels[0]), cwd=str(tmp_path))
    _run(python, "-m", "pip", "check", cwd=str(tmp_path))  # what the wheel requires is there
    shown = _run(str(venv / "bin" / "spark-zmq"), "--version", cwd=str(tmp_path))
    assert shown.stdout.strip() == f"spark-zmq {version}"
    where = _run(
        python,
        "-c",
        "import spark_zmq, pyspark_zmq, spark_zmq.cli.ping, spark_zmq.metrics; "
        "print(spark_zmq.__file__); print(pyspark_zmq.__file__); print(spark_zmq.__version__)",
        cwd=str(tmp_path),
    ).stdout.split()
    assert all(path.startswith(str(venv)) for path in where[:2]), where  # its own copy, not the checkout
    assert where[2] == version
    _run_readme_first_stream(venv, tmp_path)


def _run_readme_first_stream(venv, tmp_path) -> None:
    """The README's first stream as a newcomer runs it with this wheel: the script on the
    venv's Python (Spark's workers too), 2,000 readings from the venv's ``spark-zmq produce``
    on a free port instead of 5555; every reading is counted."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        code = re.search(r"^```python\n(.*?)^```", f.read(), re.S | re.M).group(1)
    port = str(free_ports(1)[0])
    assert code.count("5555") == 1
    script = tmp_path / "first_stream.py"
    script.write_text(
        code.replace("5555", port) + "print('TOTAL', sum(r['readings'] for r in spark.table('by_sensor').collect()))\n",
        encoding="utf-8",
    )
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python, XDG_STATE_HOME=str(tmp_path / "state"))
    producer = subprocess.Popen(
        [
            str(venv / "bin" / "spark-zmq"),
            "produce",
            f"tcp://127.0.0.1:{port}",
            "--format",
            "json",
            "--count",
            "2000",
            "--no-progress",
            "--linger",
            "120",
        ],
        cwd=str(tmp_path),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        run = subprocess.run(
            [python, str(script)], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, run.stderr[-3000:]
        assert "TOTAL 2000" in run.stdout, run.stdout[-2000:]
        assert producer.wait(120) == 0, producer.stderr.read()[-2000:] if producer.stderr else ""
    finally:
        producer.kill()
