//go:build !linux

package leaserouter

func threadUsage() threadUse { return threadUse{} }

const haveThreadUsage = false
