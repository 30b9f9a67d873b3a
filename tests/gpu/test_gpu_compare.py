"""bench/gpu_compare.py runs end to end in --quick mode and writes its JSON."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_compare_quick_json(tmp_path):
    out = tmp_path / "gpu.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_compare.py"), "--quick", "--reps", "1",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "workload" in r.stdout
    data = json.loads(out.read_text())
    assert data["rows"] and all("numpy" in row["ms"] for row in data["rows"])
    for row in data["rows"]:
        for dev, err in row["max_abs_err"].items():
            assert err < 1e-2, (row["workload"], dev, err)
