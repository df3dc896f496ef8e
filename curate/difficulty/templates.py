"""Prompt templates, chosen by name and recorded with every score.

The three of Dr. GRPO's comparison (Liu et al. 2025, "Understanding R1-Zero-Like Training", Sec. 3.1)
plus the model's own chat template:

- ``r1``: DeepSeek-R1-Zero's plain-text template with ``<think>`` / ``<answer>`` tags;
- ``qwen_math``: the Qwen2.5-Math chat markup with the "put your final answer within \\boxed{}" system prompt;
- ``chat``: the model's own chat template (``tokenizer.apply_chat_template``) around the problem and the
  same boxed instruction; the default, since instruct models expect their own markup;
- ``none``: the problem text as is.

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
TEMPLATES = ("chat", "qwen_math", "r1", "none")


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
        raise TemplateError("template 'chat' needs a tokenizer with a chat template; use qwen_math, r1 or none")
    return tokenizer.apply_chat_template(messages("chat", problem), tokenize=False, add_generation_prompt=True)


def adds_special_tokens(name: str) -> bool:
    """Whether the tokenizer should add BOS etc.: chat markup already carries its special tokens."""
    return name in ("r1", "none")
