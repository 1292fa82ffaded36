/*
 * tx/wal_irq.c — which CPU takes the log device's interrupts
 * (log_irq_affinity: with one log channel, its worker runs there).
 *
 * A device with one hardware queue (here a virtio disk; SATA disks too)
 * raises every completion interrupt on one CPU. Its block layer and file
 * system then finish a log write on that CPU (the O_DIRECT completion, the
 * RWF_DSYNC flush issued by a worker thread bound to it) and post the
 * io_uring completion to the worker that submitted the write. A channel's
 * worker on another CPU is woken across CPUs for every write; on a VM a
 * halted vCPU takes tens of µs to wake. On that CPU it is not.
 *
 * Found from sysfs and /proc, never assumed: the directory's device
 * (st_dev) -> /sys/dev/block/MAJ:MIN (a partition: its disk) -> the disk
 * has exactly one hardware queue (mq/ holds one entry) -> up its device
 * path, the first directory with msi_irqs/ (or an irq file) names the
 * device's interrupts -> /proc/interrupts counts them per CPU. The CPU is
 * the one that took at least 90 % of them, and only with at least
 * WAL_IRQ_MIN_COUNT counted: a device with several queues spreads them, a
 * loop or device-mapper disk has no interrupt of its own, a fresh device
 * has no history; each answers -1 (no CPU: the worker stays where the
 * placement put it).
 *
 * wal_irq_cpu runs once, at log open, on the opening thread, and only with
 * one channel; the channel's worker then binds itself to the CPU as it
 * starts (sched_worker_bind_cpu, sched/core/worker.c: a worker bound to one
 * CPU that way no longer leaves its waker's CPU, it has nowhere to go). No
 * shared state, no memory ordering of its own.
 * Measured with the io_uring backend (docs/durability.md); the portable
 * backend's worker moves the same way.
 */
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "tx/wal_int.h"

#define WAL_IRQ_MIN_COUNT 1000 /* interrupts counted before the answer is trusted */
#define WAL_IRQ_MAX_IRQS 64
#define WAL_IRQ_MAX_CPUS 1024
#define WAL_IRQ_UP_LEVELS 8 /* device path levels searched for the interrupts */

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Entries of a directory (not . and ..), -1 when it cannot be read. */
static int count_entries(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The disk's sysfs directory for dev (a partition's disk), or false. */
static bool disk_dir(const char *sys, dev_t dev, char *out)
{
    char link[PATH_MAX], path[PATH_MAX * 2];
    snprintf(link, sizeof(link), "%s/dev/block/%u:%u", sys, major(dev), minor(dev));
    if (!realpath(link, out))
        return false;
    snprintf(path, sizeof(path), "%s/partition", out);
    if (is_file(path)) {
        char *slash = strrchr(out, '/');
        if (!slash || slash == out)
            return false;
        *slash = '\0';
    }
    return true;
}

/* The interrupts of the device above disk (msi_irqs/ or irq, searched up the
 * path); their count. */
static int device_irqs(const char *disk, unsigned *irqs)
{
    char dir[PATH_MAX], path[PATH_MAX * 2];
    snprintf(dir, sizeof(dir), "%s", disk);
    for (int level = 0; level < WAL_IRQ_UP_LEVELS; level++) {
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
            return 0;
        *slash = '\0';
        snprintf(path, sizeof(path), "%s/msi_irqs", dir);
        DIR *d = opendir(path);
        if (d) {
            int n = 0;
            for (struct dirent *e; (e = readdir(d)) && n < WAL_IRQ_MAX_IRQS;)
                if (isdigit((unsigned char)e->d_name[0]))
                    irqs[n++] = (unsigned)strtoul(e->d_name, NULL, 10);
            closedir(d);
            return n;
        }
        snprintf(path, sizeof(path), "%s/irq", dir);
        FILE *f = fopen(path, "re");
        if (f) {
            unsigned irq = 0;
            int ok = fscanf(f, "%u", &irq) == 1 && irq > 0;
            fclose(f);
            if (ok) {
                irqs[0] = irq;
                return 1;
            }
        }
    }
    return 0;
}

static bool listed(const unsigned *irqs, int n, unsigned irq)
{
    for (int i = 0; i < n; i++)
        if (irqs[i] == irq)
            return true;
    return false;
}

/* Adds the per-CPU counts of the listed interrupts (/proc/interrupts: a
 * header of CPU columns, then "IRQ: count count ... name"). The number of
 * CPU columns, or -1. */
static int count_per_cpu(const char *proc_interrupts, const unsigned *irqs, int n, uint64_t *per_cpu,
                         int *cpu_of_col)
{
    FILE *f = fopen(proc_interrupts, "re");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    int cols = -1;
    if (getline(&line, &cap, f) > 0) {
        cols = 0;
        for (char *p = line; (p = strstr(p, "CPU")) && cols < WAL_IRQ_MAX_CPUS; p += 3)
            cpu_of_col[cols++] = atoi(p + 3);
    }
    while (cols > 0 && getline(&line, &cap, f) > 0) {
        char *p = line, *end;
        unsigned long irq = strtoul(p, &end, 10);
        if (end == p || *end != ':' || !listed(irqs, n, (unsigned)irq))
            continue;
        p = end + 1;
        for (int c = 0; c < cols; c++) {
            unsigned long long v = strtoull(p, &end, 10);
            if (end == p)
                break;
            per_cpu[c] += v;
            p = end;
        }
    }
    free(line);
    fclose(f);
    return cols;
}

int wal_irq_cpu_at(const char *sys, const char *proc_interrupts, dev_t dev)
{
    char disk[PATH_MAX], mq[PATH_MAX * 2];
    if (!disk_dir(sys, dev, disk))
        return -1;
    snprintf(mq, sizeof(mq), "%s/mq", disk);
    if (count_entries(mq) != 1)
        return -1; /* several hardware queues (or none): completions are not on one CPU */
    unsigned irqs[WAL_IRQ_MAX_IRQS];
    int n = device_irqs(disk, irqs);
    if (n <= 0)
        return -1;
    uint64_t *per_cpu = calloc(WAL_IRQ_MAX_CPUS, sizeof(*per_cpu));
    int *cpu_of_col = calloc(WAL_IRQ_MAX_CPUS, sizeof(*cpu_of_col));
    int cols = per_cpu && cpu_of_col ? count_per_cpu(proc_interrupts, irqs, n, per_cpu, cpu_of_col) : -1;
    uint64_t total = 0, top = 0;
    int best = -1;
    for (int c = 0; c < cols; c++) {
        total += per_cpu[c];
        if (per_cpu[c] > top) {
            top = per_cpu[c];
            best = cpu_of_col[c];
        }
    }
    free(per_cpu);
    free(cpu_of_col);
    if (total < WAL_IRQ_MIN_COUNT || top * 10 < total * 9)
        return -1;
    return best;
}

int wal_irq_cpu(int dirfd)
{
    struct stat st;
    if (fstat(dirfd, &st))
        return -1;
    return wal_irq_cpu_at("/sys", "/proc/interrupts", st.st_dev);
}
