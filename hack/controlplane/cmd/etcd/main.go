// Command etcd is a thin wrapper over etcd's own entry point, so the etcd server can be
// built from the go.etcd.io/etcd/server/v3 module through the module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
