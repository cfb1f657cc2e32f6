// jsonfile.h — the JSON files of a model directory (config.json,
// generation_config.json, tokenizer_config.json) read as transformers reads
// them with Python's json, or refused with where and why.
#ifndef RLPIPE_JSONFILE_H
#define RLPIPE_JSONFILE_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "util.h"

// Reads path (at most max bytes) and parses it. Refused, each with the line
// and column: text that is not UTF-8 (Python decodes the file first); what
// is not one JSON value, with the reason where there is one beyond the
// syntax: NaN and Infinity (Python's json reads them, JSON has none),
// nesting deeper than cJSON's limit (1000); and an object that holds a key
// twice (Python keeps the last value, cJSON finds the first: the two would
// read different files). The parsed tree, or NULL with err (errno ENOENT
// when the file does not exist).
cJSON *jsonfile_load(const char *path, size_t max, rl_err *err);

#endif
