// The search core: graph store, canonical hashing, rule matching and
// application, and TASO's cost-based backtracking search.
//
// The core knows no operator semantics beyond one flag per type (its two
// operands commute). A node is (type id, attribute id, salt, inputs); shapes
// are interned ids. Whatever needs meaning is asked of an
// Oracle, once per distinct key: a new node's output shapes and cost, and
// whether a structural match of a rule holds (attribute and shape constraints)
// together with the target side's attribute ids.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace taso {

// What a node type is, as far as structure goes.
enum Kind : int {
    COMPUTE = 0,   // an operator
    INPUT = 1,     // an activation fed at run time
    WEIGHT = 2,    // a constant with data
    OPAQUE = 3,    // an operator no rule matches; never merged with another
    CONSTGEN = 4,  // a constant generator (no inputs, weight-only)
};

struct Ref {
    int node = -1;
    int idx = 0;
    bool operator==(const Ref& o) const { return node == o.node && idx == o.idx; }
};

struct Node {
    int type = 0;
    int attr = 0;
    int64_t salt = 0;        // identity of sources and opaque nodes, 0 otherwise
    std::vector<Ref> in;
    std::vector<int> out;    // output shape ids
    double cost = 0;
    uint64_t hash = 0;
    bool wonly = false;      // computable from weights alone
};

struct Graph {
    std::vector<Node> nodes;  // topological order, no dead nodes, no duplicates
    std::vector<Ref> outputs;
    double cost = 0;
    uint64_t hash = 0;
    int num_ops = 0;          // run-time operators (not sources, not weight-only)
    double const_bytes = 0;   // constant data a run reads (Core::constant_bytes)
};

struct VecHash {
    size_t operator()(const std::vector<int64_t>& v) const;
};

// A rule side's node: a type and inputs, each a variable (node < 0: variable
// -1 - node) or an earlier node of the same side.
struct PNode {
    int type = 0;
    std::vector<Ref> in;
    // Source pnodes of one filter class (same operator, attribute pattern and
    // operand constraints, across rules) pass or fail the oracle's filter alike.
    int filter = -1;
};

// One step of a match plan: how to find the graph node for pattern node `pnode`.
struct Step {
    enum : int { ROOT, PRODUCER, CONSUMER_VAR, CONSUMER_NODE } kind = ROOT;
    int pnode = 0;
    int a = 0, b = 0;  // PRODUCER: consumer pnode a, input b; CONSUMER_VAR: var a;
                       // CONSUMER_NODE: output b of pnode a
    int pos = 0;       // CONSUMER_*: the input position of pnode that reads it
};

struct Rule {
    int nvars = 0;
    std::vector<PNode> src, dst;
    std::vector<std::pair<Ref, Ref>> outputs;  // source tensor -> target tensor
    std::vector<Step> plan;
    // For each source pnode p: the (consumer pnode, input position, output) edges into p.
    std::vector<std::vector<std::array<int, 3>>> uses;
    // Source symmetries: permuting the pnodes (pnode i -> nodes[i] to
    // pnode perm[i]) and renaming variable v to vars[v] leaves the pattern
    // unchanged, so a match and its image rewrite to mirror-image graphs; of a
    // set of such matches only the lexicographically smallest is used.
    struct Symmetry {
        std::vector<int> nodes, vars;
    };
    std::vector<Symmetry> symmetries;
    std::vector<std::vector<int>> dst_deps;  // per output: variables its target reads
    // The root's shape (its type, and per input the type and output index of
    // the pattern node it reads, or a variable): rules of one root shape have
    // root candidates in a graph alike.
    int root_shape = 0;
};

struct Match {
    std::vector<int> nodes;  // graph node per source pnode
    std::vector<Ref> vars;   // graph tensor per variable
    std::vector<char> swap;  // per source pnode: a commutative node matched with its inputs swapped
};

struct NodeInfo {
    bool ok = false;
    std::vector<int> out;
    double cost = 0;
};

// The bridge to operator semantics (Python), memoized here.
class Oracle {
public:
    using InferFn = std::function<std::optional<std::pair<std::vector<int>, double>>(
        int type, int attr, const std::vector<int>& shapes)>;
    using CheckFn = std::function<std::optional<std::vector<int>>(
        int rule, const std::vector<int>& attrs, const std::vector<std::vector<int>>& outs,
        const std::vector<int>& var_shapes, const std::vector<int>& var_wonly)>;

    // May graph node (attr, input shapes) stand for source pnode `pnode` of
    // `rule`, judged on that node alone? A cheap filter; `check` decides.
    using FilterFn = std::function<bool(int rule, int pnode, int attr,
                                        const std::vector<int>& shapes)>;

    Oracle(InferFn infer, CheckFn check, FilterFn filter)
        : infer_(std::move(infer)), check_(std::move(check)), filter_(std::move(filter)) {}
    const NodeInfo& infer(int type, int attr, const std::vector<int>& shapes);
    // `swap`: read the node's two inputs in the other order.
    bool node_ok(int rule, int pnode, const Graph& g, const Node& n, bool swap);
    const std::optional<std::vector<int>>& check(int rule, const Graph& g, const Match& m);
    size_t infer_calls = 0, check_calls = 0, filter_calls = 0;

private:
    InferFn infer_;
    CheckFn check_;
    FilterFn filter_;
    std::unordered_map<uint64_t, bool> filter_memo_;
    std::unordered_map<std::vector<int64_t>, NodeInfo, VecHash> infer_memo_;
    std::unordered_map<std::vector<int64_t>, std::optional<std::vector<int>>, VecHash> check_memo_;
};

struct SearchOptions {
    int budget = 1000;
    double alpha = 1.05;
    double max_ops_factor = 2.0;
    double time_limit = 0;  // seconds; 0: none
    int progress_every = 0;
    std::function<void(int expanded, double best_cost, size_t queued)> progress;
};

struct SearchResult {
    Graph best;
    double initial_cost = 0;
    int expanded = 0;
    int generated = 0;          // distinct graphs seen
    std::vector<int> applied;   // rule index per step from the input to the best graph
    double seconds = 0;
    bool budget_exhausted = false;
};

class Core {
public:
    // `commutative`: per type id, whether its two inputs may be swapped (the
    // hash ignores their order and the matcher tries both).
    Core(std::vector<int> kinds, Oracle::InferFn infer, Oracle::CheckFn check,
         Oracle::FilterFn filter, std::vector<char> commutative = {});

    int add_rule(Rule r);  // computes the match plan; returns the rule index
    // Does m match weight-only nodes alone? The search skips such rewrites:
    // they cost nothing at run time either way (folded into initializers),
    // and reshuffling constants (e.g. reassociating a concat of kernels) only
    // multiplies equal-cost graphs.
    bool weight_only(const Graph& g, const Match& m) const;
    // Is m the mirror of a match that is used instead (see Rule::symmetries)?
    bool mirrored(const Graph& g, int ri, const Match& m);
    // Finalize raw nodes (any order, inputs by raw index): topological order,
    // dead-node removal, common-node merging, weight-only flags, cost, hash.
    // nullopt on a cycle or a node the oracle rejects.
    std::optional<Graph> finalize(std::vector<Node> raw, std::vector<Ref> outputs);
    Graph build(std::vector<Node> raw, std::vector<Ref> outputs);  // throws on error

    // Every structural match of rule `ri` that passes the outside-use check.
    std::vector<Match> matches(const Graph& g, int ri);
    std::optional<Graph> apply(const Graph& g, int ri, const Match& m);
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
    // A match's identity that outlives rewrites of other nodes: the rule, the
    // hashes of the nodes and tensors it matched (each covers its inputs, not
    // its consumers) and which commutative nodes it matched swapped.
    uint64_t match_key(const Graph& g, int ri, const Match& m) const;
    // The one-step rewrites of g the search considers, in rule then match order,
    // less the matches whose keys are in `passed`; the first `skip` left out, at
    // most `limit` (-1: all).
    struct Expansion {
        int rule;
        uint64_t key;
        Graph graph;
    };
    std::vector<Expansion> expand(const Graph& g, int skip = 0, int limit = -1,
                                  const std::unordered_set<uint64_t>& passed = {});

    SearchResult search(const Graph& g, const SearchOptions& opt);

    // For tests: per applicable match, the hash rewrite_hash predicts (or the
    // cycle it sees) against the hash of the graph actually built.
    struct HashCheck {
        int rule = 0;
        std::optional<uint64_t> predicted, built;
        bool cycle = false;
    };
    std::vector<HashCheck> hash_checks(const Graph& g);

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
    bool is_commutative(const Node& n) const {
        return n.in.size() == 2 && n.type < static_cast<int>(commutative.size()) &&
               commutative[n.type];
    }
    // A commutative node whose two operands differ: it matches in two orders.
    bool swappable(const Node& n) const { return is_commutative(n) && !(n.in[0] == n.in[1]); }
    // Work counters, for benchmarks: structural matches, matches that passed
    // every check, graphs built, rewrites known by hash, graphs queued.
    size_t n_matches = 0, n_applicable = 0, n_built = 0, n_known = 0, n_pushed = 0;


private:
    std::vector<char> dirty_;  // scratch of rewrite_hash
    std::vector<uint64_t> new_hash_, dst_hash_;

public:
    std::vector<Rule> rules;
};

}  // namespace taso
