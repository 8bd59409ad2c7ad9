// etcd for the tests' control plane: the server module's own go.mod replaces its sibling modules with
// folders (../api, ../client/v3), so `go install` refuses it; requiring it from this module builds its
// main package (go.etcd.io/etcd/server/v3) with the siblings at their released versions.
module kgen.test/controlplane/etcd

go 1.25.0

require go.etcd.io/etcd/server/v3 v3.6.13
