"""Tokenizer shipped with the embedded default model.

A small WordPiece tokenizer (``tokenizers`` library) whose vocabulary is
written out explicitly, so it needs no training and no download and its JSON
(``build_tokenizer().to_str()``) is byte-identical on every call:

* special tokens ``<pad>`` = 0, ``<eos>`` = 1, ``<bos>`` = 2, ``<unk>`` = 3
  (Gemma's ids for pad/eos/bos/unk);
* every word of the Lorem ipsum text below (as whole-word pieces);
* every printable ASCII character, both as a word-initial piece and as a
  ``##`` continuation piece, so any ASCII text tokenizes without ``<unk>``
  (unknown words and words cut in the middle fall back to characters).

Like Gemma's tokenizer it adds ``<bos>`` in front and ``<eos>`` at the end of
every sequence.  The repro batch of the EmbeddingGemma report (``LOREM``,
``LENGTHS``, :func:`repro_texts`) is defined here too, so the model generator,
the harness and the tests share one definition.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # tokenizers is imported when a tokenizer is built: a run on a generated model already made needs none
    from tokenizers import Tokenizer

PAD, EOS, BOS, UNK = "<pad>", "<eos>", "<bos>", "<unk>"
SPECIAL_TOKENS = (PAD, EOS, BOS, UNK)
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
MAX_LENGTH = 512

LOREM = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
    "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat. Duis aute irure "
    "dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla pariatur. "
    "Excepteur sint occaecat cupidatat non proident, sunt in culpa qui officia deserunt "
    "mollit anim id est laborum. "
)

# Character lengths of the failing batch in the report.
LENGTHS = [279, 264, 261, 186, 87, 167, 297, 644, 926, 77, 625, 1164, 4621, 198, 358,
           873, 1670, 123, 260, 124]


def repro_texts(lengths: list[int] | None = None) -> list[str]:
    """The report's synthetic batch: prefixes of the repeated Lorem ipsum text."""
    lengths = LENGTHS if lengths is None else lengths
    return [(LOREM * (n // len(LOREM) + 2))[:n] for n in lengths]


def _vocab() -> dict[str, int]:
    words: list[str] = []
    for w in re.findall(r"\w+", LOREM):
        if w not in words:  # first-occurrence order, deterministic
            words.append(w)
    chars = [chr(c) for c in range(33, 127)]  # printable ASCII without space
    tokens = list(SPECIAL_TOKENS)
    tokens += [w for w in words if w not in chars]
    tokens += chars
    tokens += ["##" + c for c in chars]
    return {t: i for i, t in enumerate(tokens)}


VOCAB_SIZE = len(_vocab())


def build_tokenizer() -> Tokenizer:
    """A fresh tokenizer (no padding/truncation enabled; callers choose)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    tok = Tokenizer(models.WordPiece(vocab=_vocab(), unk_token=UNK,
                                     continuing_subword_prefix="##",
                                     max_input_chars_per_word=100))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A {EOS}",
        pair=f"{BOS} $A {EOS} $B:1 {EOS}:1",
        special_tokens=[(BOS, BOS_ID), (EOS, EOS_ID)],
    )
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def encode_batch(texts: list[str] | None = None, *, tokenizer: Tokenizer | None = None,
                 max_length: int = MAX_LENGTH):
    """Tokenize like the report: pad with id 0, truncate at ``max_length``.

    Returns ``(input_ids, attention_mask)`` as int64 numpy arrays.
    """
    import numpy as np

    tok = build_tokenizer() if tokenizer is None else tokenizer
    tok.enable_padding(pad_id=PAD_ID, pad_token=PAD)
    tok.enable_truncation(max_length=max_length)
    encs = tok.encode_batch(repro_texts() if texts is None else texts)
    ids = np.array([e.ids for e in encs], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encs], dtype=np.int64)
    return ids, mask
