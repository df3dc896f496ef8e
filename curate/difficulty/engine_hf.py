"""The transformers engine: ``generate`` on a local model (or on the model a trainer is training), a batch of
problems per call, seeded per problem."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from curate.difficulty.devices import engine_device
from curate.difficulty.engine_base import (
    Completion,
    Engine,
    EngineError,
    GenRequest,
    SamplingConfig,
    as_list,
    pull_requests,
    sample_seed,
)


class HFEngine(Engine):
    """transformers ``generate``: one problem per call with its k samples as the batch (seeded per problem)."""

    backend = "hf"

    def __init__(self, model_path: str, cfg: SamplingConfig, model_name: str | None = None, dtype: str | None = None,
                 device: str | None = None, model=None, tokenizer=None, batch_prompts: int = 1):
        super().__init__(cfg)
        self.batch_prompts = max(1, batch_prompts)
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as e:
            raise EngineError("backend 'hf' needs the engines extra: pip install -e '.[engines]'") from e
        self.torch = torch
        self.model_path, self.model_name = model_path, model_name or model_path
        self.device = engine_device(device or "auto", "transformers")
        try:
            self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(model_path)
            if model is None:
                from curate.difficulty.devices import engine_dtype

                td = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
                    dtype or engine_dtype(torch, self.device)]
                model = AutoModelForCausalLM.from_pretrained(model_path, dtype=td).to(self.device)
        except (OSError, ValueError) as e:
            raise EngineError(f"transformers could not load {model_path}: {e}") from e
        self.model = model.eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.eos_ids = set(as_list(self.model.generation_config.eos_token_id) or [self.tokenizer.eos_token_id])

    def stream(self, requests: Iterable[GenRequest | None], logprobs: bool = False,
               cfg: SamplingConfig | None = None) -> Iterator[tuple[str, list[Completion]]]:
        """``batch_prompts`` problems per ``generate`` call (left-padded), seeded by the first one's key.

        With the default of one problem per call a problem's samples do not depend on its neighbours;
        larger batches are faster and repeat for the same batch composition (the GRPO trainer's case).
        """
        it = iter(requests)
        cfg = cfg or self.cfg
        while True:
            batch, done = pull_requests(it, self.batch_prompts, False)
            by_shape: dict[tuple[int, int], list[GenRequest]] = {}
            for r in batch:  # one generate call per (samples, first sample) asked
                by_shape.setdefault((r.count(cfg), r.first), []).append(r)
            for group in by_shape.values():
                yield from self._generate_batch(group, logprobs, cfg)
            if done:
                return
            if not batch:
                time.sleep(0.005)

    def _generate_batch(self, reqs: list[GenRequest], logprobs: bool, cfg: SamplingConfig):
        torch = self.torch
        seqs = [r.prompt_ids if r.prompt_ids is not None else self.tokenizer(r.prompt)["input_ids"] for r in reqs]
        width = max(len(s) for s in seqs)
        pad = self.tokenizer.pad_token_id
        x = torch.tensor([[pad] * (width - len(s)) + list(s) for s in seqs], device=self.device)
        attn = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=self.device)
        torch.manual_seed(sample_seed(cfg.seed, reqs[0].key, reqs[0].first))
        k = reqs[0].count(cfg)
        with torch.no_grad():
            out = self.model.generate(
                x, attention_mask=attn, do_sample=cfg.temperature > 0, temperature=cfg.temperature or None,
                top_p=cfg.top_p, top_k=0, max_new_tokens=cfg.max_tokens, num_return_sequences=k,
                pad_token_id=pad, return_dict_in_generate=True, output_scores=logprobs,
            )
        gen = out.sequences[:, width:].tolist()
        for ri, r in enumerate(reqs):
            comps = []
            for row_i in range(ri * k, (ri + 1) * k):
                row = gen[row_i]
                n = next((i + 1 for i, t in enumerate(row) if t in self.eos_ids), None)
                finish = "stop" if n is not None else "length"
                n = n if n is not None else len(row)
                lp = None
                if logprobs:
                    lp = [torch.log_softmax(out.scores[i][row_i].float(), -1)[row[i]].item() for i in range(n)]
                comps.append(Completion(self.tokenizer.decode(row[:n], skip_special_tokens=True), n, finish, lp, row[:n]))
            yield r.id, comps

    def load_weights(self, named_tensors) -> float:
        """Copy new weights into this sampler's own model (a trainer whose model is sharded samples from a whole
        copy); returns seconds taken."""
        t0 = time.perf_counter()
        own = self.model.state_dict()
        with self.torch.no_grad():
            for k, t in named_tensors:
                own[k].copy_(t)
        return time.perf_counter() - t0

