"""Training data: text -> tokens -> sequences packed to the model's context.

Sources:
  wikipedia  the study's dump, Hugging Face wikimedia/wikipedia config 20231101.ace
             (needs the `datasets` package and internet, or its local cache)
  generated  a small deterministic encyclopedia-like corpus made here: offline runs and tests
  PATH       a local UTF-8 text file (documents separated by blank lines)
Tokenizer: GPT-2's BPE when transformers/tokenizers and its files are available
locally (no hub download is attempted), else bytes (vocab 257: 256 bytes + end-of-text).
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass

import numpy as np

from geosim.base.errors import GeosimError, require
from geosim.base.input_limits import read_input

WIKIPEDIA = ("wikimedia/wikipedia", "20231101.ace")


# ---------------------------------------------------------------- text sources
def wikipedia_texts(limit: int | None = None) -> list[str]:

    datasets = require("datasets", extra="live", command="geosim live run --data wikipedia")
    ds = datasets.load_dataset(*WIKIPEDIA, split="train")
    texts = ds["text"] if limit is None else ds.select(range(min(limit, len(ds))))["text"]
    return [t for t in texts if t.strip()]


_SUBJECTS = ["The river", "The village", "The festival", "The language", "The mountain", "The school",
             "The museum", "The island", "The market", "The kingdom", "The mosque", "The harbour"]
_VERBS = ["is located near", "was founded by", "is known for", "lies to the north of", "was rebuilt after",
          "is celebrated in", "borders", "was described by", "trades with", "is older than"]
_OBJECTS = ["the coast", "a fishing town", "the old capital", "the province", "the eastern hills",
            "the great mosque", "a local poet", "the rice fields", "the northern road", "the sultanate"]
_TAILS = ["in the sixteenth century", "during the rainy season", "according to local records",
          "since the war", "for many generations", "by the people of the region"]


def generated_texts(n_docs: int = 400, seed: int = 0) -> list[str]:
    """A deterministic corpus with real structure (a grammar over a small lexicon), so a
    model's loss falls visibly within a few dozen steps."""
    rng = random.Random(seed)
    docs = []
    for d in range(n_docs):
        title = f"Article {d}: {rng.choice(_SUBJECTS)[4:]} of {rng.choice(_OBJECTS)[4:]}"
        sentences = [f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}."
                     for _ in range(rng.randint(3, 9))]
        docs.append(title + "\n" + " ".join(sentences))
    return docs


CORPUS_MAX_BYTES = 256 << 20  # the runs read a few MB of text; a file past this is read by no run


def file_texts(path: str) -> list[str]:
    text = read_input(path, CORPUS_MAX_BYTES, "text corpus geosim trains on", path, "--data")
    docs = [d for d in text.split("\n\n") if d.strip()]
    if not docs:
        raise GeosimError("no text in file", source=path, key="--data")
    return docs


# ---------------------------------------------------------------- tokenizers
class ByteTokenizer:
    name = "bytes"
    vocab = 257
    eot = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


class GPT2Tokenizer:
    name = "gpt2"
    vocab = 50257
    eot = 50256

    def __init__(self, tok):
        self._tok = tok

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text)


# GPT-2's BPE encodes this as these ids (its vocab.json and merges.txt): a tokenizer that does not is not GPT-2's
GPT2_PROBE = ("Hello world", [15496, 995])


def is_gpt2_vocabulary(tok) -> str | None:
    """None if `tok` really is GPT-2's tokenizer, else what is wrong with it. transformers 5's
    from_pretrained(..., local_files_only=True) without the files cached returns a tokenizer with a
    one-entry vocabulary that encodes every text to nothing, instead of raising."""
    try:
        size = len(tok)
        ids = list(tok.encode(GPT2_PROBE[0]))
    except Exception as exc:  # a tokenizer that cannot even encode
        return f"it failed to encode ({type(exc).__name__})"
    if size != GPT2Tokenizer.vocab:
        return f"its vocabulary has {size} entries, GPT-2's has {GPT2Tokenizer.vocab}"
    if ids != GPT2_PROBE[1]:
        return f"it encodes {GPT2_PROBE[0]!r} as {ids[:8]}, GPT-2 as {GPT2_PROBE[1]}"
    return None


def get_tokenizer(kind: str = "auto", warn=None):
    """'auto': GPT-2's tokenizer if it is installed with its files cached locally (and really is GPT-2's),
    else bytes, with one line to `warn` (stderr by default) saying why; 'gpt2': GPT-2's or a clear error."""
    if kind == "bytes":
        return ByteTokenizer()
    try:
        from transformers import GPT2TokenizerFast  # noqa: PLC0415

        tok = GPT2TokenizerFast.from_pretrained("gpt2", local_files_only=True)
        problem = is_gpt2_vocabulary(tok)
    except Exception as exc:  # not installed, or files not cached: no hub download from here
        problem = ("transformers is not installed" if isinstance(exc, ImportError)
                   else f"its files are not cached locally ({type(exc).__name__})")
    if problem is None:
        return GPT2Tokenizer(tok)
    if kind == "gpt2":
        raise GeosimError(f"GPT-2's tokenizer is not usable here: {problem} (it needs transformers and GPT-2's "
                          "tokenizer files cached locally; --tokenizer bytes needs neither)", key="--tokenizer")
    if not problem.startswith("transformers is not installed"):
        (warn or (lambda line: print(line, file=sys.stderr)))(
            f"geosim live: GPT-2's tokenizer is not usable ({problem}): using bytes (vocabulary 257)")
    return ByteTokenizer()


# ---------------------------------------------------------------- packing and batches
@dataclass
class Dataset:
    sequences: np.ndarray  # int32 [N, n_ctx + 1]: inputs are [:, :-1], targets [:, 1:]
    source: str
    tokenizer: str
    vocab: int

    def steps_per_epoch(self, global_batch: int) -> int:
        return max(1, self.sequences.shape[0] // global_batch)

    def batch(self, step: int, global_batch: int, seed: int = 0) -> np.ndarray:
        """The same batch on every process for a given step (each process then keeps its shard).
        A fresh permutation per epoch; batches larger than the corpus wrap around."""
        n = self.sequences.shape[0]
        per_epoch = self.steps_per_epoch(global_batch)
        epoch, within = divmod(step, per_epoch)
        order = np.random.default_rng((seed, epoch)).permutation(n)
        rows = order[(within * global_batch + np.arange(global_batch)) % n]
        return self.sequences[rows]


def pack(token_lists, n_ctx: int, eot: int) -> np.ndarray:
    """Concatenate documents (separated by end-of-text) and cut into rows of n_ctx + 1 tokens."""
    stream = np.fromiter((t for toks in token_lists for t in (*toks, eot)), dtype=np.int32)
    rows = len(stream) // (n_ctx + 1)
    if rows == 0:
        raise GeosimError(f"corpus too small: {len(stream)} tokens for one sequence of {n_ctx + 1}", key="--data")
    return stream[: rows * (n_ctx + 1)].reshape(rows, n_ctx + 1)


def load(source: str, n_ctx: int, tokenizer: str = "auto", seed: int = 0) -> Dataset:
    tok = get_tokenizer(tokenizer)
    texts = None
    if source == "auto":  # the study's data when it can be had, else the offline corpus
        try:
            texts, label = wikipedia_texts(), "/".join(WIKIPEDIA)
        except Exception:  # datasets missing, no internet, no cache
            source = "generated"
    if texts is not None:
        pass
    elif source == "wikipedia":
        texts = wikipedia_texts()
        label = "/".join(WIKIPEDIA)
    elif source == "generated":
        texts, label = generated_texts(seed=seed), "generated"
    else:
        texts, label = file_texts(source), source
    return Dataset(pack((tok.encode(t) for t in texts), n_ctx, tok.eot), label, tok.name, tok.vocab)
