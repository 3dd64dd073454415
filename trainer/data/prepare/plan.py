"""What one `data prepare` will produce, decided before any work: the sources (with size and
version), the tokenizer's fingerprint, the settings that shape the output, and which sources
each slice of an Indexed Job takes. Two prepares with the same plan write the same dataset,
which is what makes a re-run a no-op."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from contract.config import DataConfig
from trainer.data.formats import FORMATS, build_format
from trainer.data.prepare.encode import load_tokenizer
from trainer.data.prepare.sources import list_sources
from trainer.data.shard_format import Manifest, Source, token_dtype
from trainer.errors import ConfigError


@dataclass
class PrepareRequest:
    data: DataConfig
    to: str
    """Output: a local directory or s3://bucket/prefix (the dataset root)."""
    slices: int = 1
    """Parts the sources are split into (one per Indexed Job index)."""
    workers: int = 0
    """Tokenizing processes; 0: one per CPU this process may use."""
    chunk_mb: float = 16.0
    """MB of JSONL text per work unit, and so per shard."""


@dataclass
class Plan:
    sources: list[Source]
    fingerprint: str
    vocab_size: int
    data_format: str
    isolate_documents: bool
    settings: dict = field(default_factory=dict)
    slices: int = 1

    @property
    def dtype(self) -> str:
        return token_dtype(self.vocab_size)

    @property
    def has_mask(self) -> bool:
        return self.data_format != "text"

    @property
    def id(self) -> str:
        body = json.dumps(
            [[asdict(s) for s in self.sources], self.fingerprint, self.settings, self.slices],
            sort_keys=True,
        )
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def assigned(self, index: int) -> list[int]:
        """Source indices of slice `index`: largest first to the least-loaded slice, so the
        slices take about equal bytes (deterministic: ties go by URI order)."""
        load = [0] * self.slices
        owner: dict[int, int] = {}
        for i in sorted(range(len(self.sources)), key=lambda i: (-self.sources[i].size, i)):
            target = min(range(self.slices), key=lambda s: (load[s], s))
            owner[i] = target
            load[target] += self.sources[i].size
        return sorted(i for i, s in owner.items() if s == index)

    def matches(self, manifest: Manifest, where: str) -> bool:
        """True when `manifest` is this plan's dataset (nothing to do); a different tokenizer
        or different sources or settings is refused: the output would become a mixture."""
        if manifest.tokenizer_fingerprint != self.fingerprint:
            raise ConfigError(
                f"data prepare: {where} already holds a dataset tokenized by "
                f"{manifest.tokenizer_fingerprint} and data.tokenizer is {self.fingerprint}: a "
                "different tokenizer writes a different dataset; choose another output"
            )
        changed = []
        if manifest.sources != self.sources:
            changed.append("sources (paths, sizes or versions)")
        if manifest.settings != self.settings or manifest.data_format != self.data_format:
            changed.append("settings (data.format, field names, eval_fraction, ...)")
        if changed:
            raise ConfigError(
                f"data prepare: {where} already holds a dataset prepared from other "
                f"{' and '.join(changed)}; choose another output (a committed dataset is never "
                "rewritten in place: runs may be reading it)"
            )
        return True


def settings_of(cfg: DataConfig) -> dict:
    """The data.* keys that shape the output (those of other formats do not)."""
    fields = {
        "text": ("text_field",),
        "prompt_completion": ("prompt_field", "completion_field"),
        "chat": ("messages_field",),
    }.get(cfg.format, ())
    keys = ("format", *fields, "eos_token", "eval_fraction")
    return {key: getattr(cfg, key) for key in keys}


def make_plan(request: PrepareRequest) -> Plan:
    cfg = request.data
    if request.slices < 1:
        raise ConfigError(f"data prepare: slices {request.slices}; allowed: 1 or more")
    if not 0 <= cfg.eval_fraction < 1:
        raise ConfigError(f"data.eval_fraction: {cfg.eval_fraction}; allowed: 0 <= x < 1")
    if cfg.format not in FORMATS:
        raise ConfigError(f"data.format: {cfg.format!r}; allowed: {', '.join(FORMATS)}")
    tokenizer = load_tokenizer(cfg)
    form = build_format(cfg, tokenizer)  # refuses chat without a template, an unknown format
    sources = list_sources(cfg.path)
    return Plan(
        sources=sources,
        fingerprint=tokenizer.fingerprint,
        vocab_size=tokenizer.vocab_size,
        data_format=cfg.format,
        isolate_documents=form.isolate_documents,
        settings=settings_of(cfg),
        slices=request.slices,
    )
