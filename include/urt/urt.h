/*
 * urt/urt.h — umbrella header of urt, a task runtime for Linux on per-worker
 * io_uring rings. Include this one; link with `pkg-config --libs urt`.
 */
#ifndef URT_URT_H
#define URT_URT_H

#include <urt/common.h>
#include <urt/config.h>
#include <urt/admission.h>
#include <urt/watchdog.h>
#include <urt/log.h>
#include <urt/runtime.h>
#include <urt/stats.h>
#include <urt/task.h>
#include <urt/lane.h>
#include <urt/job.h>
#include <urt/tx.h>
#include <urt/watcher.h>
#include <urt/graph.h>
#include <urt/io.h>
#include <urt/blocking.h>
#include <urt/batch.h>
#include <urt/dispatch.h> /* functions present when built with dispatch (libpq) */
#include <urt/deprecated.h> /* names kept for one release after a rename */

#define URT_VERSION_MAJOR 1
#define URT_VERSION_MINOR 0
#define URT_VERSION_PATCH 0
#define URT_VERSION_STRING "1.0.0"

#endif
