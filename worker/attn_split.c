// The claims of a split by segments (see worker/attn_split.h).
#include "worker/attn_split.h"

void st_attn_split_parts(const struct st_kern_attn *a, uint32_t n_ranks, struct st_work_counter *wc, float *part,
                         int n_seg)
{
    int items, hs;
    st_kern_attention_items(a, (int)n_ranks, &items, &hs);
    int hn = a->n_kv_heads / hs;
    uint64_t b, e;
    while (st_work_claim(wc, 1, (uint64_t)items, &b, &e)) {
        int s = (int)b / hs, h = (int)b % hs;
        st_kern_attention_part(a, h * hn, (h + 1) * hn, s, s + 1, part, n_seg);
    }
}

void st_attn_split_merge(const struct st_kern_attn *a, uint32_t n_ranks, struct st_work_counter *wc,
                         const float *part, int n_seg)
{
    uint64_t pairs = (uint64_t)a->M * a->n_heads, chunk = pairs / (4 * (uint64_t)n_ranks), b, e;
    while (st_work_claim(wc, chunk ? chunk : 1, pairs, &b, &e))
        st_kern_attention_merge(a, (int)b, (int)e, part, n_seg);
}
