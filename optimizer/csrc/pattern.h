// Rules as the core holds them, their match plans, and the matcher.
#pragma once

#include <array>
#include <vector>

#include "graph.h"

namespace taso {

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

// What matching any rule against one graph shares: the graph's indexes, the
// filter's answers per (filter class, node, operand order), scratch space.
struct GraphIndex {
    const Graph& g;
    std::vector<std::vector<int>> by_type, consumers;
    std::vector<int> filter_row;       // per filter class: its row in filter_ok, or -1
    std::vector<int8_t> filter_ok;     // rows of 2 per node: -1 unknown, 0 fails, 1 passes
    std::vector<char> used;            // nodes in the partial match (all 0 between rules)
    std::vector<int8_t> root_found;    // per root shape: -1 unknown, 0 no candidate, 1 some

    GraphIndex(const Graph& g_, size_t ntypes, size_t nclasses, size_t nroots);
};

class Core;

// The structural matches of rule ri in ix's graph, appended to `out` (before
// the outside-use check).
void find_matches(Core& core, GraphIndex& ix, int ri, std::vector<Match>& out);

// A match is applicable only if every tensor it computes that is not replaced
// by the target is used inside the match alone (else removing it breaks a user).
bool internal_uses_ok(const Graph& g, const Rule& r, const Match& m,
                      const std::vector<std::vector<int>>& consumers);

}  // namespace taso
