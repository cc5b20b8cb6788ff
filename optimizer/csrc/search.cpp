// The search: TASO's cost-based backtracking and why it stopped.

#include <algorithm>
#include <chrono>
#include <queue>
#include <unordered_set>

#include "core.h"

namespace taso {

const char* stop_name(Stop s) {
    switch (s) {
        case Stop::SATURATED: return "saturated";
        case Stop::EXHAUSTED: return "exhausted";
        case Stop::BUDGET: return "budget";
        case Stop::TIME_LIMIT: return "time_limit";
    }
    return "?";
}

// TASO's cost-based backtracking: a priority queue of candidate rewrites by
// rank; a candidate is expanded (its one-step rewrites queued) while it ranks
// below alpha x the best graph found; hash dedup; the op cap; the budget and
// the time limit.
SearchResult Core::search(const Graph& g0, const SearchOptions& opt) {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(clock::now() - t0).count(); };

    // Expanded graphs are kept (their children are rebuilt from them when popped);
    // queued candidates are only a parent, a rule and a match.
    struct Expanded {
        Graph g;
        int parent;
        int rule;
        Match m;  // in the parent: the path's keys are computed from it at the end
    };
    struct Candidate {
        double cost;
        uint64_t seq;
        int parent;
        int rule;
        Match m;
    };
    auto worse = [](const Candidate& a, const Candidate& b) {
        return a.cost > b.cost || (a.cost == b.cost && a.seq > b.seq);
    };
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
    std::vector<Expanded> expanded;
    std::unordered_set<uint64_t> seen{g0.hash};
    const int max_ops = static_cast<int>(opt.max_ops_factor * std::max(g0.num_ops, 1));

    const double base = g0.const_bytes;
    SearchResult res;
    res.initial_cost = g0.cost;
    res.best = g0;
    int best_parent = -1, best_rule = -1;
    Match best_match;
    uint64_t seq = 0;

    bool set_aside = false;  // a candidate was left out for its cost

    auto expand_one = [&](int e) {
        const Graph& g = expanded[e].g;
        GraphIndex ix = index(g);
        for_each_rewrite(ix, [&](int ri, Match& m, const std::vector<int>& dst_attrs) {
            // Most rewrites reach a graph already seen: tell by hash, unbuilt.
            // A graph that failed (bad shapes, too many operators) fails
            // again: its hash is remembered as well.
            bool cycle = false;
            auto h = rewrite_hash(g, ri, m, dst_attrs, ix.consumers, cycle);
            if (cycle) return true;
            if (h && !seen.insert(*h).second) {
                ++n_known;
                return true;
            }
            auto ng = apply(g, ri, m, dst_attrs);
            if (!ng || ng->num_ops > max_ops) return true;
            if (!h && !seen.insert(ng->hash).second) return true;
            const double cost = rank(*ng, base);
            if (cost < rank(res.best, base)) {
                res.best = *ng;
                best_parent = e;
                best_rule = ri;
                best_match = m;
            }
            if (cost < opt.alpha * rank(res.best, base)) {
                ++n_pushed;
                queue.push(Candidate{cost, seq++, e, ri, std::move(m)});
            } else {
                set_aside = true;
            }
            return true;
        });
    };

    expanded.push_back({g0, -1, -1, {}});
    expand_one(0);
    res.expanded = 1;
    for (;;) {
        if (queue.empty()) {
            res.stop = set_aside ? Stop::EXHAUSTED : Stop::SATURATED;
            break;
        }
        if (res.expanded >= opt.budget) {
            res.stop = Stop::BUDGET;
            break;
        }
        if (opt.time_limit > 0 && elapsed() > opt.time_limit) {
            res.stop = Stop::TIME_LIMIT;
            break;
        }
        Candidate c = queue.top();
        queue.pop();
        if (c.cost >= opt.alpha * rank(res.best, base)) {
            set_aside = true;  // the best improved since it was queued
            continue;
        }
        const Graph& parent = expanded[c.parent].g;
        const auto& dst_attrs = oracle.check(c.rule, parent, c.m);  // memoized
        auto g = dst_attrs ? apply(parent, c.rule, c.m, *dst_attrs) : std::nullopt;
        if (!g) continue;  // cannot happen: it was built once already
        expanded.push_back({std::move(*g), c.parent, c.rule, std::move(c.m)});
        expand_one(static_cast<int>(expanded.size()) - 1);
        res.expanded++;
        if (opt.progress && opt.progress_every > 0 && res.expanded % opt.progress_every == 0)
            opt.progress(res.expanded, rank(res.best, base), queue.size());
    }
    res.generated = static_cast<int>(seen.size());
    if (best_rule >= 0) {
        res.applied.push_back(best_rule);
        res.path_keys.push_back(match_key(expanded[best_parent].g, best_rule, best_match));
        for (int e = best_parent; e > 0; e = expanded[e].parent) {
            const Expanded& x = expanded[e];
            res.applied.push_back(x.rule);
            res.path_keys.push_back(match_key(expanded[x.parent].g, x.rule, x.m));
        }
        std::reverse(res.applied.begin(), res.applied.end());
        std::reverse(res.path_keys.begin(), res.path_keys.end());
    }
    res.seconds = elapsed();
    return res;
}

}  // namespace taso
