"""Config of the ``<model>/generate`` jobs (cheap to import)."""

from dataclasses import dataclass

from theseus.core.components import option


@dataclass
class GenerateConfig:
    run: str = option(
        "", "sample from RUN (its newest checkpoint) or RUN@STEP of this root, with its tokenizer"
    )
    hf_dir: str = option("", "or load the model from this Hugging Face (transformers) folder")
    prompts: list[str] = option(
        help="prompts; with no tokenizer, whitespace-separated token ids", factory=lambda: ["1 2 3"]
    )
    chat: bool = option(
        False,
        "each prompt is a user's message, put in the chat template the run was fine-tuned "
        "with (the one hf/export writes), the assistant's turn opened; the answer ends at "
        "the template's end of turn",
    )
    tokenizer: str = option(
        "", "tokenizer.json to encode/decode; '' = the run's, or <hf_dir>/tokenizer.json if any"
    )
    max_new_tokens: int = option(32, "tokens to generate per prompt", ge=1)
    temperature: float = option(0.0, "0 is greedy; otherwise the softmax temperature", ge=0)
    top_k: int = option(0, "sample among the k most likely tokens; 0 = all", ge=0)
    top_p: float = option(
        1.0, "sample among the most likely tokens holding this much mass", gt=0, le=1
    )
    seed: int = option(0, "sampling seed", ge=0)
    stop_tokens: list[int] = option(
        help="token ids that end a generation (kept); [] = the checkpoint's eos", factory=list, ge=0
    )
