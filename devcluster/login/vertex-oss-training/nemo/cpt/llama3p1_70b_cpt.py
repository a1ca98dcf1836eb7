"""Stand-in NeMo recipe: cpt of llama3p1_70b on the dev cluster (no GPUs; see _devcluster/)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "_devcluster"))

import nemo_standin  # noqa: E402

if __name__ == "__main__":
    nemo_standin.main("cpt", "llama3p1_70b")
