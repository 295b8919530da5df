# SubTernary build.  `make` builds, `make test` runs every test (plain and
# sanitized), `make run` serves one prompt with the demo model pair.
# Every target first runs `make deps`, which installs missing Debian packages.

CC       ?= gcc
BUILD    ?= build
SANITIZE ?=
CFLAGS_BASE = -O2 -g -Wall -Wextra -std=gnu11 -pthread -D_GNU_SOURCE -I. -I$(BUILD)
ifneq ($(SANITIZE),)
  CFLAGS_BASE += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS_SAN  = -fsanitize=$(SANITIZE)
endif
CFLAGS  ?=
LDLIBS   = -lzmq -lprotobuf-c -luring -lnuma -lpcre2-8 -lm -pthread
SIMD_AVX2   = -mavx2 -mfma -mf16c
SIMD_AVX512 = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx2 -mfma -mf16c
SIMD_AMX    = $(SIMD_AVX512) -mamx-tile -mamx-int8

# Library subsystems, in dependency order.  Each folder is one subsystem.
LIB_DIRS = common model kernels sampling shm proto worker coordinator client
PROTO_SRC = $(BUILD)/proto/subternary.pb-c.c
LIB_SRC  = $(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c)) $(if $(wildcard proto/*.proto),$(PROTO_SRC))
LIB_OBJ  = $(patsubst %.c,$(BUILD)/%.o,$(patsubst $(BUILD)/%,%,$(LIB_SRC)))
CLI_SRC  = $(wildcard cli/*.c)
CLI_OBJ  = $(patsubst %.c,$(BUILD)/%.o,$(CLI_SRC))
TEST_SRC = $(wildcard tests/test_*.c)
TEST_BIN = $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
TEST_SUPPORT_OBJ = $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/support/*.c))

ST_SHARED ?= ../shared
export ST_SHARED
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all deps test test-plain asan fuzz run models clean bench
all: deps
	@$(MAKE) --no-print-directory -j$(JOBS) build-all

build-all: $(BUILD)/subternary $(TEST_BIN)

deps:
	@scripts/deps.sh

$(BUILD)/proto/subternary.pb-c.c $(BUILD)/proto/subternary.pb-c.h: proto/subternary.proto
	@mkdir -p $(BUILD)/proto
	protoc-c --c_out=$(BUILD) proto/subternary.proto

$(BUILD)/proto/subternary.pb-c.o: $(BUILD)/proto/subternary.pb-c.c
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -Wno-unused-parameter -MMD -MP -c $< -o $@

# Generated protocol header must exist before anything includes it.
$(filter-out $(BUILD)/proto/subternary.pb-c.o,$(LIB_OBJ) $(CLI_OBJ) $(TEST_SUPPORT_OBJ)): | $(if $(wildcard proto/*.proto),$(BUILD)/proto/subternary.pb-c.h)

$(BUILD)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(SIMD_AVX2) -MMD -MP -c $< -o $@

$(BUILD)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(SIMD_AVX512) -MMD -MP -c $< -o $@

$(BUILD)/%_amx.o: %_amx.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(SIMD_AMX) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libsubternary.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/subternary: $(CLI_OBJ) $(BUILD)/libsubternary.a
	$(CC) $(LDFLAGS_SAN) -o $@ $(CLI_OBJ) $(BUILD)/libsubternary.a $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_SUPPORT_OBJ) $(BUILD)/libsubternary.a
	$(CC) $(LDFLAGS_SAN) -o $@ $< $(TEST_SUPPORT_OBJ) $(BUILD)/libsubternary.a $(LDLIBS) -lcmocka

# `make test`: every test against the plain build, then the unit tests under
# ASan+UBSan (a second build tree), then a summary line.
test: deps
	@$(MAKE) --no-print-directory -j$(JOBS) build-all
	@$(MAKE) --no-print-directory -j$(JOBS) BUILD=build-asan SANITIZE=address,undefined build-all
	@scripts/run-tests.sh build build-asan

test-plain: deps
	@$(MAKE) --no-print-directory -j$(JOBS) build-all
	@scripts/run-tests.sh build

asan: deps
	@$(MAKE) --no-print-directory -j$(JOBS) BUILD=build-asan SANITIZE=address,undefined build-all
	@scripts/run-tests.sh build-asan

# libFuzzer targets (clang), each run for FUZZ_SECONDS.
FUZZ_SECONDS ?= 60
fuzz: deps
	@scripts/fuzz.sh $(FUZZ_SECONDS)

models: deps
	@$(MAKE) --no-print-directory -j$(JOBS) build-all
	@scripts/make-models.sh

run: models
	@scripts/run-demo.sh

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
