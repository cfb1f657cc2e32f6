// cli_device.h — the --device option of the tools that compute with the
// model (rl-sample, rl-ratio, rl-learn). Apart from cli.c so that the tools
// that compute nothing (rl-cat, rl-sync) link no backend.
#ifndef RLPIPE_CLI_DEVICE_H
#define RLPIPE_CLI_DEVICE_H

#include "model/backend.h"

// --device (backend.h) of the tools that compute with the model: its line of
// --help, and its value parsed (exits 2 naming the option on another).
#define CLI_DEVICE_HELP                                                                                \
    "      --device D         cpu, cuda, or auto (default): cuda when built with it and\n"              \
    "                         a GPU is present, else cpu\n"
rl_device cli_parse_device(const char *s);

#endif
