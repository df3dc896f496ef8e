"""Prompt templates, chosen by name and recorded with every score.

The three of Dr. GRPO's comparison (Liu et al. 2025, "Understanding R1-Zero-Like Training", Sec. 3.1)
plus the model's own chat template:

- ``r1``: DeepSeek-R1-Zero's plain-text template with ``<think>`` / ``<answer>`` tags;
- ``qwen_math``: the Qwen2.5-Math chat markup with the "put your final answer within \\boxed{}" system prompt;
- ``chat``: the model's own chat template (``tokenizer.apply_chat_template``) around the problem and the
  same boxed instruction; the default, since instruct models expect their own markup;
- ``none``: the problem text as is;
- ``fewshot``: the model's chat template with three short worked exchanges (each answer ends in ``\\boxed{}``)
  before the problem, in the spirit of Minerva's few-shot math prompt. For small instruct models that do not
  follow a written instruction: SmolLM2-135M answers a one-digit sum right about 15% of the time under ``chat``
  and about 80% under ``fewshot`` (measured, README). The exchanges are written in forms the bundled generator
  never produces (a zero term, ``\\cdot``, the variable ``y``), so no sample problem is its own example.

``render`` gives the prompt text an engine completes; ``messages`` gives the chat form for exports and
OpenAI-compatible chat endpoints.
"""

from __future__ import annotations

from curate.core.errors import GradusError

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."

R1 = (
    "A conversation between User and Assistant. The User asks a question, and the Assistant solves it. "
    "The Assistant first thinks about the reasoning process in the mind and then provides the User with the answer. "
    "The reasoning process is enclosed within <think> </think> and answer is enclosed within <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.\n"
    "User: {problem}\nAssistant: <think>"
)
QWEN_MATH = (
    "<|im_start|>system\n" + BOXED_INSTRUCTION + "<|im_end|>\n"
    "<|im_start|>user\n{problem}<|im_end|>\n<|im_start|>assistant\n"
)
# (problem, response) pairs of the ``fewshot`` template
FEWSHOT = (
    ("What is $0 + 6$?", "$0 + 6 = 6$. The answer is $\\boxed{6}$."),
    ("What is $3 \\cdot 4$?", "$3 \\cdot 4 = 12$. The answer is $\\boxed{12}$."),
    ("Solve for $y$: $y - 3 = 4$.", "$y = 4 + 3 = 7$. The answer is $\\boxed{7}$."),
)
TEMPLATES = ("chat", "qwen_math", "r1", "none", "fewshot")
CHAT_TEMPLATES = ("chat", "fewshot")  # rendered with the model's own chat template
MESSAGE_TEMPLATES = ("chat", "qwen_math", "fewshot")  # sent as chat messages to an OpenAI-compatible chat endpoint


class TemplateError(GradusError, ValueError):
    pass


def check(name: str) -> str:
    if name not in TEMPLATES:
        raise TemplateError(f"unknown template {name!r}; choose one of: {', '.join(TEMPLATES)}")
    return name


def messages(name: str, problem: str) -> list[dict[str, str]]:
    """Chat messages for ``problem`` under template ``name`` (plain-text templates become one user turn)."""
    check(name)
    if name == "chat":
        return [{"role": "user", "content": f"{problem}\n{BOXED_INSTRUCTION}"}]
    if name == "qwen_math":
        return [{"role": "system", "content": BOXED_INSTRUCTION}, {"role": "user", "content": problem}]
    if name == "fewshot":
        shots = [m for q, a in FEWSHOT for m in ({"role": "user", "content": q}, {"role": "assistant", "content": a})]
        return [*shots, {"role": "user", "content": problem}]
    return [{"role": "user", "content": render(name, problem)}]


def render(name: str, problem: str, tokenizer=None) -> str:
    """The prompt text for ``problem``; ``chat`` needs the model's tokenizer (its chat template)."""
    check(name)
    if name == "r1":
        return R1.replace("{problem}", problem)
    if name == "qwen_math":
        return QWEN_MATH.replace("{problem}", problem)
    if name == "none":
        return problem
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise TemplateError(f"template {name!r} needs a tokenizer with a chat template; use qwen_math, r1 or none")
    return tokenizer.apply_chat_template(messages(name, problem), tokenize=False, add_generation_prompt=True)


def adds_special_tokens(name: str) -> bool:
    """Whether the tokenizer should add BOS etc.: chat markup already carries its special tokens."""
    return name in ("r1", "none")
