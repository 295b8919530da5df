// The acceptance governor of a session: drafting is suspended while the
// draft's acceptance over the last rounds is below a threshold; after 32
// target-only steps one probe round (the session keeps it to K <= 2)
// measures the draft again, and each failed probe doubles the wait (up to
// 256), so a draft that never agrees costs almost nothing.
//
// Acceptance here is accepted / examined drafts: a round examines its drafts
// up to the first rejection.  Accepted / drafted would count the drafts
// after a rejection, never looked at, against a long K: a Q4_0 draft of the
// 3B pair agreeing 68% of the time fell under 0.30 in a window of K = 3-6
// rounds and lost 32 target-only steps of 128 tokens.
#ifndef ST_COORDINATOR_GOVERNOR_H
#define ST_COORDINATOR_GOVERNOR_H

#include <stdbool.h>
#include <stdint.h>

#define ST_GOVERNOR_WINDOW 8
#define ST_GOVERNOR_PROBE_EVERY 32 // target-only steps before the first probe
#define ST_GOVERNOR_PROBE_MAX 256  // the wait doubles after each failed probe, up to this

struct st_governor {
    bool on;          // off: drafting is never suspended
    float threshold;  // acceptance below this suspends drafting
    bool drafting;
    uint32_t since_probe, probe_every;
    uint16_t acc[ST_GOVERNOR_WINDOW], examined[ST_GOVERNOR_WINDOW];
    uint32_t n;       // rounds in the window since it started
};

// Drafts a round of K with m accepted examined: the m, and the rejected one
// unless all K passed.
static inline uint32_t st_drafts_examined(uint32_t K, uint32_t m) { return m < K ? m + 1 : m; }

void st_governor_reset(struct st_governor *g, bool on, float threshold);

// Called once per step of a session that speculates: whether this step is a
// probe round (while suspended, every probe_every steps).
bool st_governor_probe_due(struct st_governor *g);

// A round of K drafts of which the first m were accepted; `probe` if it was
// a probe.  A probe alone decides whether drafting resumes; otherwise the
// window decides whether it stops.
void st_governor_update(struct st_governor *g, uint32_t K, uint32_t m, bool probe);

#endif
