"""--hang-timeout on a real GPU (issue 30 part 4): tests/gpu/hang_check.py's
cases, where PYTHON_EXEC's torch sees a CUDA device and NCCL. Skipped
elsewhere: CI's machines have no GPU; the results of the last run on one
are in docs/cli.md ("Hangs") and the issue's closing note."""
import subprocess

import pytest

from conftest import PYTHON, ROOT, TORCH_HAS_CUDA_NCCL, TRUN, base_env


@pytest.mark.skipif(not TORCH_HAS_CUDA_NCCL,
                    reason="needs a CUDA device and NCCL under PYTHON_EXEC")
def test_a_rank_blocked_on_its_gpu_is_reported_with_its_flight_recorder(tmp_path):
    r = subprocess.run([PYTHON, str(ROOT / "tests" / "gpu" / "hang_check.py"), TRUN,
                        str(tmp_path)], env=base_env(), capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
