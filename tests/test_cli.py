"""The command line, end to end in a subprocess."""

import re
import subprocess
import sys


def run(*args):
    return subprocess.run([sys.executable, "-m", "sdjax", *args], capture_output=True, text=True, timeout=300)


def test_demo_prints_a_summary():
    result = run("demo", "--duration", "2")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "spacedyn_sample (6 joints, 2 end points, 160.0 kg), float64" in out
    assert "200 RK4 steps" in out
    drift = re.search(r"angular ([0-9.e+-]+) kg m\^2/s", out)
    assert drift and float(drift.group(1)) < 1e-8  # momentum conserved (started at rest)


def test_demo_bad_option_is_one_line_error():
    result = run("demo", "--dt", "-1")
    assert result.returncode == 2
    assert "need 0 < dt <= duration" in result.stderr
    assert "Traceback" not in result.stderr
    result = run("demo", "--model", "nonexistent")
    assert result.returncode == 2 and "invalid choice" in result.stderr
