/* sb_bwprobe.h - a memory read bandwidth probe to interleave with decode
 * (switchboard bench --membw).
 *
 * On a shared host the bandwidth a decoder can get moves by tens of percent
 * within minutes, so a best-of-N probe before a run says little about the
 * run. This probe is short (a few tens of ms) and is run between decode
 * windows, on its own threads, so each window's decode speed can be set
 * against the bandwidth measured next to it (docs/PERFORMANCE.md).
 */
#ifndef SB_BWPROBE_H
#define SB_BWPROBE_H

#include <stddef.h>

typedef struct sb_bwprobe sb_bwprobe;

/* A probe with `threads` readers over a buffer of buf_bytes (≥ 4 chunks;
 * far past the last-level cache so every chunk is read cold). Returns 0 or
 * SB_ENOMEM. */
int    sb_bwprobe_new(int threads, size_t buf_bytes, sb_bwprobe **out);
void   sb_bwprobe_free(sb_bwprobe *p);
/* One window: a plain pass, a prefetching pass (like tools/membw) and a
 * pass reading two streams per thread, each over the next chunk of the
 * buffer; the best one, in GB/s (1e9 bytes). */
double sb_bwprobe_window(sb_bwprobe *p);
/* The same with only `readers` (1..threads) of the probe's threads reading:
 * one buffer serves the 1-thread and the T-thread figure. */
double sb_bwprobe_window_n(sb_bwprobe *p, int readers);

#endif
