#include "coordinator/governor.h"

void st_governor_reset(struct st_governor *g, bool on, float threshold)
{
    *g = (struct st_governor){.on = on, .threshold = threshold, .drafting = true,
                              .probe_every = ST_GOVERNOR_PROBE_EVERY};
}

bool st_governor_probe_due(struct st_governor *g) { return !g->drafting && ++g->since_probe >= g->probe_every; }

void st_governor_update(struct st_governor *g, uint32_t K, uint32_t m, bool probe)
{
    if (probe) g->n = 0; // a probe starts a new window
    g->acc[g->n % ST_GOVERNOR_WINDOW] = (uint16_t)m;
    g->examined[g->n % ST_GOVERNOR_WINDOW] = (uint16_t)st_drafts_examined(K, m);
    g->n++;
    if (!g->on) return;
    uint32_t n = g->n < ST_GOVERNOR_WINDOW ? g->n : ST_GOVERNOR_WINDOW, acc = 0, examined = 0;
    for (uint32_t i = 0; i < n; i++) acc += g->acc[i], examined += g->examined[i];
    bool pays = acc >= g->threshold * examined;
    if (probe) {
        g->drafting = pays;
        if (pays) g->probe_every = ST_GOVERNOR_PROBE_EVERY;
        else if (g->probe_every < ST_GOVERNOR_PROBE_MAX) g->probe_every *= 2;
    } else if (!pays && ((n >= 2 && acc == 0) || n >= 4)) {
        // Two rounds with nothing accepted are a collapse; a draft that
        // agrees in runs can have two poor rounds by chance, so a low rate
        // needs four rounds before drafting stops.
        g->drafting = false;
    }
    if (!g->drafting) g->since_probe = 0;
}
