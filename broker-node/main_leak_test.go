package main

import (
	"testing"

	"github.com/funduq/funduq-go/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.MainWithPools(m) }
