// Command weft is the single binary of the weft parallel file system: servers,
// client mount, admin tools and benchmarks are its subcommands.
package main

import (
	"fmt"
	"os"

	"github.com/weft-fs/weft/internal/timerslack"

	"github.com/spf13/cobra"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "weft",
		Short:         "weft: a striped parallel file system in user space",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newUpCmd(),
		newKeygenCmd(),
		newMetaCmd(),
		newStorageCmd(),
		newMountCmd(),
		newSetstripeCmd(),
		newGetstripeCmd(),
		newResyncCmd(),
		newMigrateCmd(),
		newDfCmd(),
		newBenchCmd(),
		newVersionCmd(),
		newStatusCmd(),
		newFindCmd(),
		newAdminCmd(),
		newQuotaCmd(),
		newProjectCmd(),
		newJobstatsCmd(),
		newParamCmd(),
		newTargetCmd(),
		newScrubCmd(),
	)
	setVersions(root)
	return root
}

func main() {
	if err := timerslack.Relax(); err != nil {
		fmt.Fprintln(os.Stderr, "weft:", err)
		os.Exit(2)
	}
	root := newRootCmd()
	root.SetArgs(findArgs(os.Args[1:]))
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "weft:", err)
		os.Exit(1)
	}
}
