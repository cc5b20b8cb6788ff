// The search core: graph store, canonical hashing, rule matching and
// application, and TASO's cost-based backtracking search. One class, its
// parts in one file each:
//   graph.cpp    building graphs: order, dedup, hash, cost, constant bytes
//   oracle.cpp   the memoized questions to Python (oracle.h)
//   pattern.cpp  rules: their match plans, the matcher, symmetries (pattern.h)
//   rewrite.cpp  the one match -> filter -> apply loop, applying a match,
//                predicting the rewritten graph's hash
//   search.cpp   the priority queue, its limits and why it stopped
#pragma once

#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "graph.h"
#include "oracle.h"
#include "pattern.h"

namespace taso {

struct SearchOptions {
    int budget = 1000;            // graphs expanded at most
    double alpha = 1.05;          // candidates up to alpha x the best are queued
    double max_ops_factor = 2.0;  // op cap: candidates with more run-time operators are dropped
    double time_limit = 0;        // seconds; 0: none
    int progress_every = 0;
    std::function<void(int expanded, double best_cost, size_t queued)> progress;
};

// Why a search stopped, from the least limited to the most.
enum class Stop : int {
    SATURATED,   // the queue ran empty and nothing was set aside for its cost:
                 // every graph the rules reach within the op cap was expanded
    EXHAUSTED,   // the queue ran empty: every candidate within alpha x the best
                 // was expanded, some beyond it were set aside
    BUDGET,      // the budget of expanded graphs was spent, candidates left
    TIME_LIMIT,  // the time limit passed, candidates left
};
const char* stop_name(Stop s);

struct SearchResult {
    Graph best;
    double initial_cost = 0;
    int expanded = 0;
    int generated = 0;          // distinct graphs seen
    std::vector<int> applied;   // rule index per step from the input to the best graph
    std::vector<uint64_t> path_keys;  // match_key per step, in its parent graph (rewrite_at)
    double seconds = 0;
    Stop stop = Stop::SATURATED;
};

class Core {
public:
    // `commutative`: per type id, whether its two inputs may be swapped (the
    // hash ignores their order and the matcher tries both).
    Core(std::vector<int> kinds, Oracle::InferFn infer, Oracle::CheckFn check,
         Oracle::FilterFn filter, std::vector<char> commutative = {});

    // ---- graphs (graph.cpp) ----------------------------------------------------------
    // Finalize raw nodes (any order, inputs by raw index): topological order,
    // dead-node removal, common-node merging, weight-only flags, cost, hash.
    // nullopt on a cycle or a node the oracle rejects.
    // `remap` (optional): per raw node, its index in the result (-1: dead).
    std::optional<Graph> finalize(std::vector<Node> raw, std::vector<Ref> outputs,
                                  std::vector<int>* remap = nullptr);
    Graph build(std::vector<Node> raw, std::vector<Ref> outputs);  // throws on error
    // Bytes of the constant data one run of g reads: every weight or folded
    // constant a run-time node or an output reads, once, and the pinned weights.
    double constant_bytes(const Graph& g) const;
    // What the search ranks a graph by: its cost, plus `byte_cost` for each byte
    // of constants it reads beyond `base_bytes` (those of the graph the search
    // began with). A rewrite that concatenates weights other nodes still read
    // adds constant data that every run streams; node costs cannot see it.
    double rank(const Graph& g, double base_bytes) const {
        return g.cost + byte_cost * (g.const_bytes - base_bytes);
    }

    // ---- rules and matching (pattern.cpp) ----------------------------------------------
    int add_rule(Rule r);  // computes the match plan; returns the rule index
    // Every structural match of rule `ri` that passes the outside-use check.
    std::vector<Match> matches(const Graph& g, int ri);
    // Does m match weight-only nodes alone? The search skips such rewrites:
    // they cost nothing at run time either way (folded into initializers),
    // and reshuffling constants (e.g. reassociating a concat of kernels) only
    // multiplies equal-cost graphs.
    bool weight_only(const Graph& g, const Match& m) const;
    // Is m the mirror of a match that is used instead (see Rule::symmetries)?
    bool mirrored(const Graph& g, int ri, const Match& m);
    // A match's identity that outlives rewrites of other nodes: the rule, the
    // hashes of the nodes and tensors it matched (each covers its inputs, not
    // its consumers) and which commutative nodes it matched swapped.
    uint64_t match_key(const Graph& g, int ri, const Match& m) const;

    // ---- rewriting (rewrite.cpp) -----------------------------------------------------
    // The one match -> filter -> apply loop. Every match of every rule in
    // ix's graph, in rule then match order, that passes every filter: not of
    // weight-only nodes alone, no outside use of a tensor it removes, the
    // oracle's check, not the mirror image of another match. `visit(rule,
    // match, target attribute ids)` decides what to do with it (it may move
    // the match) and returns false to stop the loop.
    using Visit = std::function<bool(int rule, Match& m, const std::vector<int>& dst_attrs)>;
    void for_each_rewrite(GraphIndex& ix, const Visit& visit);
    GraphIndex index(const Graph& g) const {
        return GraphIndex(g, kinds.size(), filter_reps.size(), root_shapes.size());
    }
    // The graph rule `ri` at match `m` (target attributes `dst_attrs`, the
    // oracle's answer) rewrites g to; nullopt where it is not a valid graph.
    // `targets` (optional): the result's node per target pnode (-1: dead).
    std::optional<Graph> apply(const Graph& g, int ri, const Match& m,
                               const std::vector<int>& dst_attrs,
                               std::vector<int>* targets = nullptr);
    // The hash of the graph `apply` would build, computed from g's node hashes
    // without building it; nullopt when a variable lies downstream of the match
    // (a possible cycle: only building tells). `consumers` indexes g.
    // `cycle` is set when the rewrite certainly creates a cycle.
    std::optional<uint64_t> rewrite_hash(const Graph& g, int ri, const Match& m,
                                         const std::vector<int>& dst_attrs,
                                         const std::vector<std::vector<int>>& consumers,
                                         bool& cycle);
    // Would the rewrite make a variable depend on a target that reads it?
    // (needs dirty_ as rewrite_hash leaves it)
    bool creates_cycle(const Graph& g, const Rule& r, const Match& m);
    // The one-step rewrites of g, in rule then match order, less the matches
    // whose keys are in `passed`; the first `skip` left out, at most `limit`
    // (-1: all).
    struct Expansion {
        int rule;
        uint64_t key;
        Graph graph;
    };
    std::vector<Expansion> expand(const Graph& g, int skip = 0, int limit = -1,
                                  const std::unordered_set<uint64_t>& passed = {});
    // For tests: per applicable match, the hash rewrite_hash predicts (or the
    // cycle it sees) against the hash of the graph actually built.
    struct HashCheck {
        int rule = 0;
        std::optional<uint64_t> predicted, built;
        bool cycle = false;
    };
    std::vector<HashCheck> hash_checks(const Graph& g);
    // The rewrite of g whose match_key is `key`, retraced for reports (where a
    // rule fired): its rule, the matched nodes of g, the nodes of the result
    // that its target built, and the result; nullopt where no match has it.
    struct Traced {
        int rule;
        std::vector<int> matched, targets;
        Graph graph;
    };
    std::optional<Traced> rewrite_at(const Graph& g, uint64_t key);

    // ---- search (search.cpp) ---------------------------------------------------------
    SearchResult search(const Graph& g, const SearchOptions& opt);

    Oracle oracle;
    double byte_cost = 0;              // cost of one more byte of constants a run reads
    std::vector<double> shape_bytes;   // per shape id
    // Salts of the weights that the rest of the model reads as well (the graph
    // is one piece of it): they stay in the model whatever this graph does.
    std::unordered_set<int64_t> pinned;
    std::vector<int> kinds;
    std::vector<char> commutative;
    // Per filter class: the (rule, pnode) the oracle's filter is asked about.
    std::vector<std::pair<int, int>> filter_reps;
    std::unordered_map<std::vector<int64_t>, int, VecHash> root_shapes;  // -> Rule::root_shape
    std::vector<Rule> rules;
    bool is_commutative(const Node& n) const {
        return n.in.size() == 2 && n.type < static_cast<int>(commutative.size()) &&
               commutative[n.type];
    }
    // A commutative node whose two operands differ: it matches in two orders.
    bool swappable(const Node& n) const { return is_commutative(n) && !(n.in[0] == n.in[1]); }
    // Work counters, for benchmarks: structural matches, matches that passed
    // every filter, graphs built, rewrites known by hash, graphs queued.
    size_t n_matches = 0, n_applicable = 0, n_built = 0, n_known = 0, n_pushed = 0;

private:
    std::vector<char> dirty_;  // scratch of rewrite_hash
    std::vector<uint64_t> new_hash_, dst_hash_;
};

}  // namespace taso
