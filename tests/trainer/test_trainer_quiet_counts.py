"""What a run's log says: malformed lines skipped under data.max_bad_fraction are counted where
the run reads them (and the trainer notes the count at start-up); a step line leaves out keys
without a value (mfu/percent on CPU) while the metrics file keeps them."""

from __future__ import annotations

import json

from contract.config import DataConfig, MetricsConfig
from tests.trainer.test_trainer_bad_input import GOOD, write_lines
from trainer.data import open_training_data
from trainer.metrics import MetricsLogger
from trainer.storage import open_run_storage
from trainer.tokenizer import ByteTokenizer


def test_skipped_malformed_lines_are_counted_by_what_the_run_reads(tmp_path):
    data = write_lines(tmp_path, [GOOD] * 199 + ["{broken"])
    cfg = DataConfig(path=data, seq_len=8, max_bad_fraction=0.05)
    opened = open_training_data(cfg, ByteTokenizer(), 257)
    assert opened.malformed_lines == 1


def test_a_step_line_leaves_out_keys_without_a_value(tmp_path, capsys):
    storage = open_run_storage(str(tmp_path))
    logger = MetricsLogger(
        storage, MetricsConfig(), enabled=True, first_step=0, total_steps=2, run_config={}
    )
    logger.log({"step": 1, "loss": 2.5, "mfu/percent": None})
    line = capsys.readouterr().out.strip()
    assert line == "[trainer] step=1 loss=2.5"
    record = json.loads((tmp_path / "logs" / "metrics.jsonl").read_text())
    assert record["mfu/percent"] is None
