# Switchboard - one binary, bin/switchboard, plus cmocka test programs.
#
#   make            build bin/switchboard (optimised, with debug info)
#   make test       build and run the unit + integration tests
#   make test SAN=1 the same under AddressSanitizer + UBSan (what .ci/run does)
#   make deps       apt-get install the build dependencies that are missing
#   make check      deps + the whole suite under ASan/UBSan (the README's test command, CI)
#   make fuzz       libFuzzer targets (clang), FUZZ_SECONDS each
#   make bench      side-by-side benchmark against llama.cpp (see docs/PERFORMANCE.md)
#   make models     install a real small instruct GGUF into models/
#   make check-real tool calling, an agent framework and logprobs on that
#                   real model and the optional 1.5B (minutes; not part of
#                   make check)
#   make fleet-test two runtimes behind HAProxy sharing sessions in one
#                   PostgreSQL over TLS (not part of make check)
#   make privacy-check the leak check with 500 calls, and the demo's pipeline
#                   under a privacy policy on the real models (minutes;
#                   not part of make check)
#
# Sources are found by wildcard: adding a .c file to a module directory (or a
# sub-folder of one, e.g. worker/engine/) is enough. Includes name their module
# from the top ("worker/engine/sb_engine.h"), so the only -I is the root.
# Files named *_avx2.c / *_avx512.c / *_avx512vbmi.c / *_amx.c get their ISA flags only there; the
# rest of the binary stays baseline x86-64 and picks kernels by CPUID at run time.

CC      ?= cc
SAN     ?= 0
BUILD   ?= build
BIN     ?= bin
PKGS    := libevent libevent_pthreads msgpack yaml-0.1 sqlite3 libpq libcurl libcrypto

ifeq ($(SAN),1)
BUILD   := build-san
OPT     := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDSAN   := -fsanitize=address,undefined
else
OPT     := -O2
LDSAN   :=
endif

TOP      := common ipc worker cache kb privacy router supervisor
MODULES  := $(patsubst %/,%,$(sort $(dir $(shell find $(TOP) -name '*.c' 2>/dev/null))))
INCLUDES := -I.
WARN     := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CFLAGS   ?=
override CFLAGS += -std=c11 -g $(OPT) $(WARN) -D_GNU_SOURCE -pthread $(INCLUDES) \
            $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm -pthread

AVX2_FLAGS   := -mavx2 -mfma -mf16c
AVX512_FLAGS := $(AVX2_FLAGS) -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512vnni
AVX512VBMI_FLAGS := $(AVX512_FLAGS) -mavx512vbmi
AMX_FLAGS    := $(AVX512VBMI_FLAGS) -mamx-tile -mamx-int8

LIB_SRC  := $(filter-out supervisor/main.c,$(wildcard $(addsuffix /*.c,$(MODULES))))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
# The operator console's page (console/*: HTML, JS, CSS) is compiled into the
# binary as C arrays (xxd -i, named after the path: console_app_js...), so
# GET /console works offline with nothing installed beside the binary.
CONSOLE_FILES := console/index.html console/app.js console/app.css
CONSOLE_OBJ   := $(BUILD)/gen/console_assets.o
LIB_OBJ  += $(CONSOLE_OBJ)
MAIN_OBJ := $(BUILD)/supervisor/main.o
LIB      := $(BUILD)/libswitchboard.a

TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_LIBS := $(shell pkg-config --libs cmocka 2>/dev/null)

.PHONY: all test check check-real fleet-test privacy-check deps fuzz bench rag-bench models clean demo
# SAN=1 builds its own binary so a sanitized build never replaces bin/.
SB_BIN := $(if $(filter 1,$(SAN)),$(BUILD)/switchboard,$(BIN)/switchboard)
all: $(SB_BIN)

$(SB_BIN): $(MAIN_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDSAN) -o $@ $^ $(LDLIBS)

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX2_FLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%_avx512vbmi.o: %_avx512vbmi.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512VBMI_FLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%_amx.o: %_amx.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AMX_FLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/gen/console_assets.c: $(CONSOLE_FILES)
	@mkdir -p $(dir $@)
	for f in $(CONSOLE_FILES); do xxd -i $$f || exit 1; done > $@.tmp && mv $@.tmp $@

$(CONSOLE_OBJ): $(BUILD)/gen/console_assets.c
	$(CC) $(CFLAGS) -c -o $@ $<

# Tests include tests/*.h (their shared harnesses): a change there rebuilds them.
$(BUILD)/tests/%: tests/%.c $(LIB) $(wildcard tests/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(TEST_LIBS) $(LDSAN) $(LDLIBS)

# The fuzz targets with a plain main() that replays files (tests/fuzz/replay.c):
# built by the project's compiler and flags, run over their seeds by
# tests/it_fuzz_seeds.sh. Fuzzing proper is `make fuzz`.
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz-replay/%)

$(BUILD)/fuzz-replay/%: tests/fuzz/%.c tests/fuzz/replay.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< tests/fuzz/replay.c $(LIB) $(LDSAN) $(LDLIBS)

# The integration tests drive the real binary; under SAN=1 that is the
# sanitized build, so forked workers are checked too.
test: $(TEST_BIN) $(SB_BIN) $(FUZZ_BIN)
	SB_BIN=$(abspath $(SB_BIN)) SB_BUILD=$(BUILD) tests/run.sh $(TEST_BIN)

deps:
	tools/deps.sh

# The README's test command and what .ci/run calls: dependencies, then the
# whole suite under AddressSanitizer + UBSan. Each step is its own make so
# pkg-config runs after deps installed what it looks for.
check:
	tools/deps.sh
	$(MAKE) test SAN=1

# The real 0.5B model (make models) behind the OpenAI door: forced tool
# calls and logprobs against `switchboard logits`; a langchain agent loop on
# the optional 1.5B (tools/models.sh qwen15) (tests/real/check_real.sh). Not
# in `check`: minutes of inference and 1.5 GB of models that CI does not
# fetch.
check-real: all
	tools/deps.sh real
	SB_BIN=$(abspath $(SB_BIN)) bash tests/real/check_real.sh

# A site's fleet (docs/operations.md, "A fleet"): a real PostgreSQL over
# TLS, two runtimes and HAProxy on this box (tests/fleet_test.sh). Not in
# `check`: two more runtimes, a database and a proxy are about a minute on
# two cores, and the PostgreSQL store it relies on is already in `check`
# (tests/test_sessions_pg.c, on a real server).
fleet-test: all
	tools/deps.sh fleet
	SB_BIN=$(abspath $(SB_BIN)) bash tests/fleet_test.sh

# Callers' personal data (docs/PRIVACY.md, "The leak test"): the leak check
# of `check` with 500 calls, then configs/demo.yaml's hotline under a
# pseudonymize policy on the real models (make models), cloud sync
# included: zero values in any store, the cloud's pg_dump or an upstream,
# and the replies restored (tests/real/privacy_check.sh). Not in `check`:
# minutes of inference on models CI does not fetch.
privacy-check: all
	tools/deps.sh privacy
	SB_BIN=$(abspath $(SB_BIN)) bash tests/real/privacy_check.sh

fuzz:
	tools/fuzz.sh

bench: all
	tools/bench.sh

# Our retrieve -> compose pipeline against a Python RAG stack (llama-cpp-python,
# chromadb, FastAPI) at 10 concurrent callers: tools/rag_bench.sh, its own
# venv in build/rag_bench. Not in `check`: an hour of inference.
rag-bench: all
	SB_BIN=$(abspath $(SB_BIN)) tools/rag_bench.sh

models:
	tools/models.sh

demo:
	tools/demo.sh

clean:
	rm -rf build build-san bin

-include $(LIB_OBJ:.o=.d) $(MAIN_OBJ:.o=.d)
