package main

import (
	"os"
	"testing"

	"github.com/idemctl/idemctl/internal/server/servertest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	servertest.Cleanup() // the binary servertest.Binary built
	os.Exit(code)
}
