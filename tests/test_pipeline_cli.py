"""`raytile pipeline validate|describe|run|bench` on the examples and on bad files."""

from __future__ import annotations

import os
import re

from raytile.cli import main

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
AO = os.path.join(EXAMPLES, "ao_loop.yaml")


def test_validate_and_describe(capsys):
    assert main(["pipeline", "validate", AO]) == 0
    out = capsys.readouterr().out
    assert "ok: ao_loop: 9 stages, 9 streams, 6 trigger levels, placement groups sensor -> control" in out
    assert main(["pipeline", "describe", AO]) == 0
    out = capsys.readouterr().out
    assert "level 3: matvec (matvec)" in out and "  control: reconstructor, matvec, integrator, clip" in out
    assert "placement in-process: all 9 stages in one thread" in out
    assert main(["pipeline", "describe", AO, "--placement", "ray"]) == 0  # describes without starting Ray
    out = capsys.readouterr().out
    assert "placement ray: 2 actors over node-local sockets, 2 steps in flight at most" in out
    assert "control: reconstructor, matvec, integrator, clip (upstream: sensor; sends: -; {'num_cpus': 0})" in out


def test_run_and_bench_in_process(capsys):
    assert main(["pipeline", "run", os.path.join(EXAMPLES, "detector_preproc.yaml"), "--steps", "16",
                 "--show", "total"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("in-process: 16 steps") and re.search(r"long_exposure\s+integrate\s+steps\s+16", out)
    assert "total = [" in out
    assert main(["pipeline", "bench", AO, "--placement", "in-process", "--steps", "50"]) == 0
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(r"in-process: [\d,]+ Hz, p50 \d+\.\d\d ms, p99 \d+\.\d\d ms", line), line


def test_bad_input(tmp_path, capsys):
    assert main(["pipeline", "validate", str(tmp_path / "missing.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("streams: {a: {shape: [4]}}\nstages:\n  - {name: s, kind: nope, output: a}\n")
    assert main(["pipeline", "validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "stage 's': field 'kind'" in err and "nope" in err
    assert main(["pipeline", "bench", AO, "--placement", "warp-drive"]) == 2
    assert "unknown placement 'warp-drive'" in capsys.readouterr().err
    assert main(["pipeline", "run", AO, "--steps", "0"]) == 2
