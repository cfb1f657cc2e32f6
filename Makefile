# rlpipe — reinforcement learning for language models as composable Unix tools.
#   make               build every tool into bin/
#   make check         build and run every test; ends with "N passed, N failed[, N skipped]"
#   make install       PREFIX=/usr/local: binaries and man pages
#   make clean
# Missing Debian packages are installed by scripts/deps.sh (as root) or named.

PREFIX ?= /usr/local
CC ?= cc
OPT ?= -O2
WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2 -Wno-format-nonliteral
BASE_CFLAGS := -std=gnu11 -g -D_GNU_SOURCE -Icommon $(WARN)
SAN_FLAGS := -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

TOOLS := $(notdir $(wildcard tools/rl-*))
LIB_SRC := $(wildcard common/*.c)
TEST_SRC := $(wildcard tests/unit/test_*.c)
TESTS := $(patsubst tests/unit/%.c,%,$(TEST_SRC))

# build/deps.mk is made first: it installs what is missing and records which
# pkg-config names this system has (msgpack-c is "msgpack" on Debian 12).
ifeq ($(filter clean,$(MAKECMDGOALS)),)
-include build/deps.mk
endif
PKG_CFLAGS := $(if $(PKGS),$(shell pkg-config --cflags $(PKGS)))
PKG_LIBS := $(if $(PKGS),$(shell pkg-config --libs $(PKGS))) -lm

CFLAGS ?=
LDFLAGS ?=
ALL_CFLAGS = $(BASE_CFLAGS) $(PKG_CFLAGS) $(CFLAGS)

.PHONY: all check install clean
all: $(addprefix bin/,$(TOOLS))

build/deps.mk: scripts/deps.sh
	@sh scripts/deps.sh build
	@mkdir -p build
	@pc=msgpack; pkg-config --exists msgpack-c && pc=msgpack-c; \
	  echo "PKGS := libzstd $$pc" > $@

# Normal build: optimised objects, a static library, the tools.
build/obj/%.o: %.c build/deps.mk
	@mkdir -p $(dir $@)
	$(CC) $(OPT) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

build/librlpipe.a: $(patsubst %.c,build/obj/%.o,$(LIB_SRC))
	@rm -f $@
	ar rcs $@ $^

bin/%: build/obj/tools/%/main.o build/librlpipe.a
	@mkdir -p bin
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS)

build/tests/%: build/obj/tests/unit/%.o build/librlpipe.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(PKG_LIBS)

# Sanitizer build (AddressSanitizer + UndefinedBehaviorSanitizer) of the same
# sources: the record-layer unit tests and rl-cat, run by make check.
build/asan/%.o: %.c build/deps.mk
	@mkdir -p $(dir $@)
	$(CC) $(SAN_FLAGS) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

build/asan/librlpipe.a: $(patsubst %.c,build/asan/%.o,$(LIB_SRC))
	@rm -f $@
	ar rcs $@ $^

build/asan/bin/%: build/asan/tools/%/main.o build/asan/librlpipe.a
	@mkdir -p $(dir $@)
	$(CC) $(SAN_FLAGS) $(LDFLAGS) -o $@ $^ $(PKG_LIBS)

build/asan/tests/%: build/asan/tests/unit/%.o build/asan/librlpipe.a
	@mkdir -p $(dir $@)
	$(CC) $(SAN_FLAGS) $(LDFLAGS) -o $@ $^ $(PKG_LIBS)

TEST_BINS := $(addprefix build/tests/,$(TESTS)) $(addprefix build/asan/tests/,$(TESTS)) \
             $(addprefix build/asan/bin/,$(TOOLS))

check: all $(TEST_BINS)
	@sh scripts/deps.sh test
	@bash tests/run.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5
	install -m 755 $(addprefix bin/,$(TOOLS)) $(DESTDIR)$(PREFIX)/bin/
	install -m 644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 man/*.5 $(DESTDIR)$(PREFIX)/share/man/man5/

clean:
	rm -rf build bin

.SECONDARY:
-include $(shell find build -name '*.d' 2>/dev/null)
