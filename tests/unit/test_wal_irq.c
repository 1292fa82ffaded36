/*
 * tests/unit/test_wal_irq.c — log_irq_affinity (tx/wal_irq.c): the CPU that
 * takes the log device's interrupts, found from sysfs and /proc/interrupts,
 * and the one channel's worker placed there.
 *
 *   - on forged sysfs trees (a disk, a partition, its PCI device's msi_irqs
 *     or a legacy irq file; /proc/interrupts with offline CPUs between the
 *     columns): the CPU that took at least 90 % of the device's interrupts;
 *   - refused (-1): several hardware queues, interrupts spread over CPUs,
 *     too short a history, no interrupt up the device path (a loop or
 *     device-mapper disk), no sysfs entry for the device;
 *   - on this machine: with one log channel the channel's worker runs on
 *     the CPU found for the log directory (when there is one and the worker
 *     may run elsewhere too), and stays on its CPUs with the option off or
 *     with a channel per worker.
 */
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "helpers.h"
#include "tx/wal_int.h"

/* ---- a forged tree ------------------------------------------------------------------ */

static void put(const char *root, const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(path, 0755);
        *p = '/';
    }
    if (!text) { /* a directory */
        mkdir(path, 0755);
        return;
    }
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static void link_to(const char *root, const char *rel, const char *target)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    put(root, rel, "");
    unlink(path);
    cr_assert_eq(symlink(target, path), 0, "%s", path);
}

#define PCI "sys/devices/pci0000:00/0000:00:02.0"
#define DISK PCI "/virtio1/block/vda"

/* A virtio disk vda (254:0) with a partition vda1 (254:1), n_queues hardware
 * queues, its PCI function's MSI interrupts 35 (config) and 36 (requests). */
static char *forge(unsigned n_queues, const char *interrupts)
{
    char *root = test_tmpdir("wal-irq");
    put(root, PCI "/msi_irqs/35", "msix\n");
    put(root, PCI "/msi_irqs/36", "msix\n");
    put(root, PCI "/irq", "11\n");
    for (unsigned q = 0; q < n_queues; q++) {
        char rel[256];
        snprintf(rel, sizeof(rel), DISK "/mq/%u/cpu_list", q);
        put(root, rel, "0-3\n");
    }
    put(root, DISK "/vda1/partition", "1\n");
    link_to(root, "sys/dev/block/254:0", "../../devices/pci0000:00/0000:00:02.0/virtio1/block/vda");
    link_to(root, "sys/dev/block/254:1", "../../devices/pci0000:00/0000:00:02.0/virtio1/block/vda/vda1");
    put(root, "interrupts", interrupts);
    return root;
}

static int cpu_of(const char *root, unsigned maj, unsigned min)
{
    char sys[1024], irq[1024];
    snprintf(sys, sizeof(sys), "%s/sys", root);
    snprintf(irq, sizeof(irq), "%s/interrupts", root);
    return wal_irq_cpu_at(sys, irq, makedev(maj, min));
}

/* Offline CPU 1: the columns are CPU0, CPU2, CPU3. */
static const char *const ONE_CPU = "           CPU0       CPU2       CPU3       \n"
                                   " 35:          0          1          0  PCI-MSIX-0000:00:02.0   0-edge  virtio1-config\n"
                                   " 36:         12     500000         40  PCI-MSIX-0000:00:02.0   1-edge  virtio1-req.0\n"
                                   " 40:     900000          0          0  PCI-MSIX-0000:00:05.0   1-edge  virtio4-input\n"
                                   "NMI:          0          0          0   Non-maskable interrupts\n";

Test(wal_irq, the_cpu_of_a_single_queue_device_and_of_its_partition)
{
    char *root = forge(1, ONE_CPU);
    cr_expect_eq(cpu_of(root, 254, 0), 2, "the disk: CPU 2 took its interrupts (the third column's name)");
    cr_expect_eq(cpu_of(root, 254, 1), 2, "a partition: its disk's device");
    test_remove_tree(root);
}

Test(wal_irq, a_legacy_irq_line_when_there_is_no_msi)
{
    char *root = forge(1, "           CPU0       CPU1\n"
                          " 11:       4000         10   IO-APIC  11-fasteoi  ahci\n"
                          " 36:          0     500000   PCI-MSIX  virtio1-req.0\n");
    char path[1024];
    snprintf(path, sizeof(path), "%s/" PCI "/msi_irqs", root);
    test_remove_tree_at(path);
    cr_assert_eq(access(path, F_OK), -1, "%s is gone", path);
    cr_expect_eq(cpu_of(root, 254, 0), 0, "irq 11 (the irq file), not 36");
    test_remove_tree(root);
}

Test(wal_irq, no_cpu_where_completions_are_not_on_one)
{
    char *root = forge(4, ONE_CPU);
    cr_expect_eq(cpu_of(root, 254, 0), -1, "four hardware queues");
    test_remove_tree(root);

    root = forge(1, "      CPU0       CPU1\n"
                    " 36:  60000      40000   PCI-MSIX  virtio1-req.0\n");
    cr_expect_eq(cpu_of(root, 254, 0), -1, "spread 60/40");
    test_remove_tree(root);

    root = forge(1, "      CPU0       CPU1\n"
                    " 36:      0        999   PCI-MSIX  virtio1-req.0\n");
    cr_expect_eq(cpu_of(root, 254, 0), -1, "fewer than 1000 interrupts counted");
    test_remove_tree(root);

    root = forge(1, ONE_CPU);
    cr_expect_eq(cpu_of(root, 7, 0), -1, "no sysfs entry for the device");
    put(root, "sys/devices/virtual/block/loop0/mq/0/cpu_list", "0-3\n");
    link_to(root, "sys/dev/block/7:0", "../../devices/virtual/block/loop0");
    cr_expect_eq(cpu_of(root, 7, 0), -1, "a loop disk: no interrupt up its path");
    char irq[1024];
    snprintf(irq, sizeof(irq), "%s/none", root);
    char sys[1024];
    snprintf(sys, sizeof(sys), "%s/sys", root);
    cr_expect_eq(wal_irq_cpu_at(sys, irq, makedev(254, 0)), -1, "no /proc/interrupts");
    test_remove_tree(root);
}

/* ---- the channel's worker on this machine ---------------------------------------------- */

struct where {
    cpu_set_t set;
    _Atomic int done;
};

static enum urt_task_result read_affinity(struct urt_task *t, void *arg)
{
    (void)t;
    struct where *w = arg;
    sched_getaffinity(0, sizeof(w->set), &w->set);
    atomic_store(&w->done, 1);
    return URT_TASK_DONE;
}

/* Worker 0's CPUs, with the log in dir under these settings. */
static void worker0_cpus(const char *dir, uint32_t workers, uint32_t channels, bool on, cpu_set_t *out)
{
    struct urt_config cfg;
    test_config(&cfg, workers);
    cfg.log_dir = dir;
    cfg.log_channels = channels;
    cfg.log_irq_affinity = on;
    urt_runtime *rt = rt_create_or_skip(&cfg);
    struct where w = {.done = 0};
    cr_assert_eq(urt_spawn_to(rt, 0, read_affinity, NULL, &w, 0), 0, "%s", urt_last_error());
    for (int i = 0; i < 5000 && !atomic_load(&w.done); i++)
        sleep_us(1000);
    cr_assert(atomic_load(&w.done));
    *out = w.set;
    rt_destroy_clean(rt, URT_SHUTDOWN_DRAIN, 0);
}

Test(wal_irq, one_channel_runs_where_the_log_devices_interrupts_are)
{
    char *dir = test_tmpdir("wal-irq-rt");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    cr_assert(dfd >= 0);
    int cpu = wal_irq_cpu(dfd);
    close(dfd);
    cpu_set_t mine, got;
    cr_assert_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
    bool movable = cpu >= 0 && CPU_ISSET(cpu, &mine) && CPU_COUNT(&mine) > 1;
    cr_log_info("the log directory's device: interrupts on CPU %d (%s)", cpu,
                movable ? "the worker moves there" : "nothing to move: the worker keeps its CPUs");

    /* one channel: log_channels = 1 of 2 workers, or the one worker of a runtime */
    for (uint32_t workers = 1; workers <= 2; workers++) {
        worker0_cpus(dir, workers, workers == 2 ? 1 : 0, true, &got);
        if (movable)
            cr_expect(CPU_COUNT(&got) == 1 && CPU_ISSET(cpu, &got),
                      "%u worker(s), one channel: worker 0 on CPU %d only (%d CPUs)", workers, cpu, CPU_COUNT(&got));
        else
            cr_expect(CPU_COUNT(&got) > 1 || CPU_COUNT(&mine) == 1, "no CPU found: worker 0 keeps its CPUs");
    }
    worker0_cpus(dir, 2, 1, false, &got);
    cr_expect(CPU_COUNT(&got) > 1 || CPU_COUNT(&mine) == 1, "log_irq_affinity false: worker 0 keeps its CPUs");
    worker0_cpus(dir, 2, 0, true, &got);
    cr_expect(CPU_COUNT(&got) > 1 || CPU_COUNT(&mine) == 1, "a channel per worker: none is moved");
    test_remove_dir(dir);
    if (!movable)
        cr_skip_test("no single CPU takes this machine's log device interrupts (%d): the move itself is not tested",
                     cpu);
}
