"""Difficulty: engines (vLLM, transformers, OpenAI-compatible servers), models, prompt templates, grading with
math-verify, and the estimation stage with its store. ``rl_stage`` uses this package's public names only."""

from curate.difficulty.engines import Completion, Engine, EngineError, GenRequest, HFEngine, SamplingConfig, VLLMEngine
from curate.difficulty.extraction import EXPLICIT, cut_off_unanswered, extract_prediction
from curate.difficulty.grading import GRADER_VERSION, GradingPool
from curate.difficulty.models import ModelError, resolve_model

__all__ = ["EXPLICIT", "GRADER_VERSION", "Completion", "EngineError", "GenRequest", "GradingPool", "HFEngine", "ModelError",
           "Engine", "SamplingConfig", "VLLMEngine", "cut_off_unanswered", "extract_prediction", "resolve_model"]
