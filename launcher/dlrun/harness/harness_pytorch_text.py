"""dlrun PyTorch harness: the tokens an LLM trains on - synthetic tokens, a
real text corpus tokenised by a byte-level tokenizer, or pre-tokenised
binary shards - cut into windows of T + 1 tokens (inputs and the next
tokens).  Standard library + torch; importable on Python >= 3.6 with
PyTorch >= 1.0 (reading shards needs torch.frombuffer, PyTorch >= 1.10).

What ``--data-dir DIR`` may hold (exactly one kind; anything else, or a mix,
is an error naming what was found and what is expected):

* ``*.bin`` token shards, in name order, read through a memory map:
  Megatron-LM's IndexedDataset (``NAME.bin`` with ``NAME.idx`` beside it,
  whose header - ``MMIDIDX\\x00\\x00``, version 1, a dtype code - says uint16
  (code 8) or int32 (code 4)); llm.c's shards (a header of 256 int32, the
  first 20240520 with uint16 tokens or 20240801 with uint32 tokens, the
  third the token count); otherwise nanoGPT's headerless layout, uint16
  unless ``--token-dtype uint32``.
* ``*.jsonl`` JSON lines, one object per line whose ``"text"`` is a
  string; a line that is not is an error naming the file and line.
* ``*.txt`` plain text; each file is one document.

Text (JSON lines and plain text) is tokenised by the harness's byte-level
tokenizer: each UTF-8 byte is one token (0-255), and every document starts
with BOS (256); 258 ids in all, so it fits every model's vocabulary.  The
whole corpus is tokenised into memory, at most ``--max-corpus-bytes`` of
files (default 1 GiB); shards are memory-mapped and have no such limit.

Windows: each step a rank draws ``batch`` start offsets uniformly from the
token stream (a generator seeded with --seed + rank, so ranks read
different windows, as nanoGPT's loader does) and gathers T + 1 tokens from
each; every window's token ids are checked against the model's vocabulary
(an id out of range is an error naming the file).  Synthetic data is one
fixed random window batch per rank, generated once and kept on the device.
"""

import json
import mmap
import os
import stat
import struct

import torch

from harness_common import HarnessError

BOS = 256
TOKENIZER_VOCAB = 258
DEFAULT_MAX_CORPUS_BYTES = 1 << 30
MEGATRON_HEADER = b"MMIDIDX\x00\x00"
MEGATRON_DTYPES = {8: ("uint16", 2), 4: ("int32", 4)}
LLMC_MAGIC = {20240520: ("uint16", 2), 20240801: ("uint32", 4)}
LLMC_HEADER_BYTES = 256 * 4
EXPECTED = ("token shards *.bin (Megatron .bin/.idx, llm.c or nanoGPT "
            "layout), JSON lines *.jsonl with a \"text\" field, or plain "
            "text *.txt")


def _regular_files(directory, suffix):
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise HarnessError("--data-dir %s: cannot read (%s); expected %s"
                           % (directory, exc.strerror or exc, EXPECTED))
    found = []
    for name in names:
        if not name.endswith(suffix):
            continue
        path = os.path.join(directory, name)
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise HarnessError("--data-dir: %s is not a regular file; "
                               "expected %s" % (path, EXPECTED))
        found.append(path)
    return found


def find_corpus(directory):
    """(kind, files): "bin", "jsonl" or "text" and the files, in name
    order; one line naming the problem where there is not exactly one
    kind."""
    kinds = [(kind, _regular_files(directory, suffix)) for kind, suffix in
             (("bin", ".bin"), ("jsonl", ".jsonl"), ("text", ".txt"))]
    present = [(kind, files) for kind, files in kinds if files]
    if not present:
        raise HarnessError("--data-dir %s holds no corpus; expected %s"
                           % (directory, EXPECTED))
    if len(present) > 1:
        raise HarnessError("--data-dir %s holds %s; expected one kind: %s"
                           % (directory, " and ".join(
                               "%d %s file(s)" % (len(f), k)
                               for k, f in present), EXPECTED))
    return present[0]


# --- text and the byte-level tokenizer ---------------------------------------

def encode(text):
    """Token ids of one document: BOS, then its UTF-8 bytes."""
    return [BOS] + list(bytearray(text.encode("utf-8")))


def _documents(kind, path):
    """The documents of one text file, as bytes."""
    with open(path, "rb") as f:
        if kind == "text":
            yield f.read()
            return
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line.decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                raise HarnessError("%s:%d: not a JSON line (%s); expected "
                                   "an object with a \"text\" string"
                                   % (path, number, str(exc)[:80]))
            text = record.get("text") if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise HarnessError("%s:%d: expected an object with a "
                                   "\"text\" string" % (path, number))
            yield text.encode("utf-8")


def tokenize_corpus(kind, files, max_bytes=DEFAULT_MAX_CORPUS_BYTES):
    """The corpus as one int16 tensor of byte-level token ids."""
    total = sum(os.path.getsize(p) for p in files)
    if total > max_bytes:
        raise HarnessError("--data-dir: the %s files hold %d bytes, more "
                           "than --max-corpus-bytes %d; pre-tokenise a "
                           "corpus this large into .bin shards"
                           % (kind, total, max_bytes))
    parts = []
    for path in files:
        for doc in _documents(kind, path):
            ids = torch.zeros(len(doc) + 1, dtype=torch.int16)
            ids[0] = BOS
            if doc:
                ids[1:] = torch.frombuffer(bytearray(doc), dtype=torch.uint8)
            parts.append(ids)
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int16)


# --- binary token shards -------------------------------------------------------

def _shard_layout(path, token_dtype):
    """(dtype name, bytes per token, header bytes, layout) of one shard."""
    idx = path[:-len(".bin")] + ".idx"
    if os.path.exists(idx):
        with open(idx, "rb") as f:
            head = f.read(len(MEGATRON_HEADER) + 9)
        if (len(head) < len(MEGATRON_HEADER) + 9
                or head[:len(MEGATRON_HEADER)] != MEGATRON_HEADER):
            raise HarnessError("%s: not a Megatron index (no MMIDIDX "
                               "header)" % idx)
        version = struct.unpack("<Q", head[9:17])[0]
        code = head[17] if isinstance(head[17], int) else ord(head[17])
        if version != 1 or code not in MEGATRON_DTYPES:
            raise HarnessError("%s: Megatron index version %d, dtype code "
                               "%d; readable: version 1 with uint16 (8) or "
                               "int32 (4) tokens" % (idx, version, code))
        name, size = MEGATRON_DTYPES[code]
        return name, size, 0, "megatron"
    with open(path, "rb") as f:
        head = f.read(12)
    if len(head) == 12:
        magic, _, count = struct.unpack("<iii", head)
        if magic in LLMC_MAGIC:
            name, size = LLMC_MAGIC[magic]
            return name, size, LLMC_HEADER_BYTES, "llm.c"
    if token_dtype not in (None, "auto", "uint16", "uint32"):
        raise HarnessError("--token-dtype %s; valid: auto, uint16, uint32"
                           % token_dtype)
    if token_dtype == "uint32":
        return "uint32", 4, 0, "nanogpt"
    return "uint16", 2, 0, "nanogpt"


class _Shard(object):
    def __init__(self, path, token_dtype):
        self.path = path
        self.dtype, self.size, self.offset, self.layout = _shard_layout(
            path, token_dtype)
        nbytes = os.path.getsize(path) - self.offset
        if nbytes <= 0 or nbytes % self.size:
            raise HarnessError("%s: %d bytes of tokens is not a whole "
                               "number of %s tokens (%s layout)"
                               % (path, max(nbytes, 0), self.dtype,
                                  self.layout))
        self.tokens = nbytes // self.size
        self._file = open(path, "rb")
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)

    def window(self, start, length):
        """``length`` token ids from ``start``, as int64."""
        first = self.offset + start * self.size
        raw = bytearray(self._map[first:first + length * self.size])
        if self.size == 2:  # little-endian uint16 read as int16, then masked
            return torch.frombuffer(raw, dtype=torch.int16).long() & 0xFFFF
        return torch.frombuffer(raw, dtype=torch.int32).long() & 0xFFFFFFFF

    def close(self):
        self._map.close()
        self._file.close()


class TokenWindows(object):
    """Random windows of T + 1 tokens from shards or a tokenised corpus:
    ``next()`` gives ((inputs,), (targets,)), each (batch, T), on the
    device (the data source interface of harness_pytorch_data)."""

    loads = True  # read in this process: nothing prefetched
    prefetched = 0

    def __init__(self, directory, batch, seq_length, vocab_size, seed, rank,
                 device, token_dtype=None, max_bytes=DEFAULT_MAX_CORPUS_BYTES):
        if getattr(torch, "frombuffer", None) is None:
            raise HarnessError("--data-dir with an LLM needs torch.frombuffer "
                               "(PyTorch >= 1.10), which PyTorch %s lacks"
                               % torch.__version__)
        self.kind, files = find_corpus(directory)
        self.directory, self.batch, self.span = directory, batch, seq_length + 1
        self.vocab_size, self.device = vocab_size, device
        self.gen = torch.Generator()
        self.gen.manual_seed(seed + rank)
        self.shards, self.corpus = [], None
        if self.kind == "bin":
            self.shards = [_Shard(p, token_dtype) for p in files]
            sizes = [s.tokens for s in self.shards]
        else:
            self.corpus = tokenize_corpus(self.kind, files, max_bytes)
            sizes = [int(self.corpus.numel())]
        self.starts = [max(0, n - self.span + 1) for n in sizes]
        self.tokens = sum(sizes)
        if sum(self.starts) == 0:
            raise HarnessError("--data-dir %s: %d tokens, fewer than one "
                               "window of %d (--seq-length + 1)"
                               % (directory, self.tokens, self.span))
        self.windows = 0
        self._pin = device.type == "cuda"

    def label(self):
        return {"bin": "token shards", "jsonl": "JSON lines",
                "text": "plain text"}[self.kind]

    def _pick(self):
        """(shard index or None, start), uniform over every window."""
        k = int(torch.randint(0, sum(self.starts), (1,), generator=self.gen))
        for i, n in enumerate(self.starts):
            if k < n:
                return i, k
            k -= n
        raise AssertionError("window index out of range")

    def _window(self):
        i, start = self._pick()
        if self.corpus is not None:
            return self.corpus[start:start + self.span].long(), None
        return self.shards[i].window(start, self.span), self.shards[i].path

    def next(self):
        rows = []
        for _ in range(self.batch):
            ids, path = self._window()
            top = int(ids.max())
            if top >= self.vocab_size:
                raise HarnessError("token id %d in %s is outside the model's "
                                   "vocabulary of %d"
                                   % (top, path or self.directory,
                                      self.vocab_size))
            rows.append(ids)
        block = torch.stack(rows)
        if self._pin:
            block = block.pin_memory()
        block = block.to(self.device, non_blocking=self._pin)
        self.windows += self.batch
        return (block[:, :-1],), (block[:, 1:],)

    def fields(self):
        layouts = sorted(set(s.layout for s in self.shards))
        dtypes = sorted(set(s.dtype for s in self.shards))
        return {"data_source": {"bin": "token-shards", "jsonl": "jsonl",
                                "text": "text"}[self.kind],
                "data_path": self.directory, "data_tokens": self.tokens,
                "data_files": len(self.shards) or None,
                "token_layout": ",".join(layouts) or "byte-level",
                "token_dtype": ",".join(dtypes) or "byte",
                "windows_read": self.windows}

    def close(self):
        for shard in self.shards:
            shard.close()
        self.shards, self.corpus = [], None


def synthetic_windows(batch, seq_length, vocab_size, seed):
    """One random window batch ((inputs,), (targets,)) on the CPU."""
    gen = torch.Generator()
    gen.manual_seed(seed)
    block = torch.randint(0, vocab_size, (batch, seq_length + 1),
                          generator=gen, dtype=torch.long)
    return (block[:, :-1],), (block[:, 1:],)
