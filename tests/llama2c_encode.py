"""llama2c_encode.py: a faithful Python port of karpathy/llama2.c run.c's
tokenizer (build_tokenizer + encode), for checking converted tokenizers."""
import struct


def load_tokenizer_bin(path, vocab_size=None):
    """Returns (pieces: [bytes], scores: [float]) like run.c's build_tokenizer.
    vocab_size None: read until the end of the file."""
    with open(path, "rb") as f:
        data = f.read()
    off = 4  # max_token_length
    pieces, scores = [], []
    while off < len(data) and (vocab_size is None or len(pieces) < vocab_size):
        score, n = struct.unpack_from("<fi", data, off)
        off += 8
        pieces.append(data[off:off + n])
        off += n
        scores.append(score)
    return pieces, scores


class Llama2cTokenizer:
    def __init__(self, path, vocab_size=None):
        self.pieces, self.scores = load_tokenizer_bin(path, vocab_size)
        self.lookup = {}
        for i, p in enumerate(self.pieces):
            self.lookup.setdefault(p, i)

    def encode(self, text, bos=True, eos=False):
        """run.c encode(): text is str (UTF-8 encoded here) or bytes."""
        if isinstance(text, str):
            text = text.encode("utf-8")
        look = self.lookup.get
        tokens = []
        if bos:
            tokens.append(1)
        if len(text) > 0:
            tokens.append(look(b" "))  # add_dummy_prefix
        buf = b""
        for i, c in enumerate(text):
            if (c & 0xC0) != 0x80:
                buf = b""
            buf += bytes([c])
            nxt = text[i + 1] if i + 1 < len(text) else 0
            if (nxt & 0xC0) == 0x80 and len(buf) < 4:
                continue
            tid = look(buf, -1)
            if tid != -1:
                tokens.append(tid)
            else:
                tokens.extend(b + 3 for b in buf)  # byte fallback: <0x00> is id 3
            buf = b""
        while True:
            best_score, best_id, best_idx = -1e10, -1, -1
            for i in range(len(tokens) - 1):
                tid = look(self.pieces[tokens[i]] + self.pieces[tokens[i + 1]], -1)
                if tid != -1 and self.scores[tid] > best_score:
                    best_score, best_id, best_idx = self.scores[tid], tid, i
            if best_idx == -1:
                break
            tokens[best_idx] = best_id
            del tokens[best_idx + 1]
        if eos:
            tokens.append(2)
        return tokens
