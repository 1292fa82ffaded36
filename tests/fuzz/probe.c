/* tests/fuzz/probe.c — configure-time check that clang can build a libFuzzer target. */
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    (void)data;
    (void)size;
    return 0;
}
