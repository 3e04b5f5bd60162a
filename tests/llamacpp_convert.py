#!/usr/bin/env python3
"""llamacpp_convert.py: runs llama.cpp's convert_hf_to_gguf.py on a test fixture.

    python3 tests/llamacpp_convert.py CONVERTER MODEL_DIR --outtype f32 --outfile F.gguf

CONVERTER is the path `../shared/tools/peer-llamacpp --convert` prints. The fixtures' tokenizers are tiny
byte-level BPEs (scripts/make_fixture.py) that the converter's table of known pre-tokenizers (hashes of real
models' tokenizers) does not hold, and it stops on them; the tokenizer is not what tests/test_gguf_model.py checks,
so that one lookup answers "gpt-2". Everything else (metadata keys, tensor names and types, the q/k permutation of
llama) is the converter's own code, run unchanged."""
import os
import runpy
import sys


def main():
    converter = sys.argv[1]
    sys.argv = [converter] + sys.argv[2:]
    sys.path.insert(0, os.path.dirname(converter))
    import conversion.base as base   # the converter's package, beside it
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
    runpy.run_path(converter, run_name="__main__")


if __name__ == "__main__":
    main()
