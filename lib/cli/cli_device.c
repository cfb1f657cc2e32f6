// cli_device.c — --device (cli_device.h).
#include "cli/cli_device.h"

#include "cli/cli.h"

rl_device cli_parse_device(const char *s) {
    rl_device d;
    if (dev_parse(s, &d)) cli_usage_error("--device: expected cpu, cuda or auto, got '%s'", s);
    return d;
}
