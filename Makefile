# llmcc: an ahead-of-time compiler from Hugging Face checkpoints to one
# standalone executable.
#   make                      build the compiler, then build and run the default model
#   make MODEL=DIR|NAME       compile MODEL into build/NAME/ and build its executable
#        [TARGET=cpu|cuda]    default: cuda where nvcc and a GPU are present, else cpu
#   make llmcc                the compiler alone: build/llmcc
#   make test                 every test that needs no GPU (ends with "N passed, N failed")
#   make test-asan            the same with AddressSanitizer + UndefinedBehaviorSanitizer
#   make deps                 install the build dependencies (Debian/Ubuntu, as root)
CC       ?= cc
OPT      ?= -O2
SAN      ?=
CFLAGS   := -std=c11 -D_GNU_SOURCE $(OPT) -g -Wall -Wextra -Werror $(SAN)
BUILD    ?= build
PYTHON   ?= python3

SRCS := $(wildcard compiler/*.c) runtime/tokenizer.c
HDRS := $(wildcard compiler/*.h) $(wildcard runtime/*.h)
OBJDIR := $(BUILD)/obj$(if $(SAN),-san)
OBJS := $(patsubst %.c,$(OBJDIR)/%.o,$(SRCS))
LLMCC := $(BUILD)/llmcc$(if $(SAN),-san)

DEB_PKGS := gcc make libjsmn-dev libzstd-dev libutf8proc-dev python3 python3-numpy

.PHONY: all llmcc test test-asan deps clean default-model check-deps
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

deps:
	apt-get update -qq && apt-get install -y -qq $(DEB_PKGS)
	@$(PYTHON) -c "import numpy" 2>/dev/null || pip install numpy
	@$(PYTHON) -c "import tokenizers" 2>/dev/null || pip install tokenizers || echo "llmcc: tokenizers (PyPI) not installed: the tokenizer parity tests will skip"

test: llmcc
	$(PYTHON) tests/run.py

test-asan:
	$(MAKE) llmcc SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" OPT=-O1
	LLMCC_SANITIZE=1 LLMCC_BIN=$(abspath $(BUILD))/llmcc-san ASAN_OPTIONS=detect_leaks=0 $(PYTHON) tests/run.py

# ---- models ----
HAVE_GPU := $(shell command -v nvcc >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo yes)
TARGET   ?= $(if $(HAVE_GPU),cuda,cpu)
PROMPT   ?= Once upon a time

ifneq ($(MODEL),)
MODEL_NAME := $(notdir $(patsubst %/,%,$(MODEL)))
all: llmcc
	$(LLMCC) build $(MODEL) -o $(BUILD)/$(MODEL_NAME) --target $(TARGET)
	$(MAKE) -C $(BUILD)/$(MODEL_NAME) -j2
	@echo "built: $$(ls -d $(BUILD)/$(MODEL_NAME)/* | grep -v '\.' | grep -v Makefile | grep -v append_payload | grep -v obj | head -1)"
else
# Until the project ships a trained default model, `make` builds a tiny
# random-weight Llama made by scripts/make_fixture.py: it shows the whole
# path (compile, pack, build, run), but its text is noise.
all: llmcc
	@test -f $(BUILD)/default-model/config.json || $(PYTHON) scripts/make_fixture.py llama-gqa $(BUILD)/default-model
	$(LLMCC) build $(BUILD)/default-model -o $(BUILD)/default --target $(TARGET) --name llama
	$(MAKE) -C $(BUILD)/default -j2
	$(BUILD)/default/llama --prompt "$(PROMPT)" -n 24 --temperature 0
endif

clean:
	rm -rf $(BUILD)
