// Placeholder translation unit: the search core lands with the optimizer issue.
#include <nanobind/nanobind.h>

NB_MODULE(_search, m) {
    m.doc() = "taso search core";
    m.def("version", []() { return 1; });
}
