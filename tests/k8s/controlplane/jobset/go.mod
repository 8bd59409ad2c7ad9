// The JobSet controller for the tests' control plane. The proxy serves sigs.k8s.io/jobset at this version but
// answers 403 for the module's version list, which `go install pkg@version` reads (for deprecation notices):
// requiring it from this module and building its main package (the module root) needs no list.
module kgen.test/controlplane/jobset

go 1.25.0

require sigs.k8s.io/jobset v0.12.0
