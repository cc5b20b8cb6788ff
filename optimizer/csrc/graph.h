// The graph store's data: nodes, graphs and the hash that identifies them.
//
// A node is (type id, attribute id, salt, inputs); shapes are interned ids.
// The core knows no operator semantics beyond a Kind per type and one flag
// (its two operands commute); whatever needs meaning is asked of the Oracle.
#pragma once

#include <cstdint>
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

// ---- hashing ----------------------------------------------------------------------
// A node's hash covers its type, attribute, salt and its inputs' hashes (with
// their output indexes), so equal hashes mean equal computations; a graph's
// hash covers its outputs'. `finalize` and `rewrite_hash` must agree on it.
constexpr uint64_t HASH_SEED = 1469598103934665603ULL;

inline uint64_t mix(uint64_t h, uint64_t v) {
    // splitmix64 finalizer over the running hash and the next value
    uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// The hash a node starts from, before its inputs are mixed in.
inline uint64_t node_seed(int type, int attr, int64_t salt) {
    return mix(mix(mix(HASH_SEED, type), attr), salt);
}

struct VecHash {
    size_t operator()(const std::vector<int64_t>& v) const;
};

}  // namespace taso
