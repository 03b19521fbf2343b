// fast-cpp-csv-parser (Debian libfccp-dev), included once for every reader here.
// It copies file names with strncpy into fixed buffers, which GCC warns about once
// inlined; the truncation is the library's documented limit.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-truncation"
#pragma GCC diagnostic ignored "-Wrestrict"
#include <libfccp/csv.h>
#pragma GCC diagnostic pop
