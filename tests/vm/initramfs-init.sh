#!/bin/busybox sh
# /init of the test VM's initramfs (tests/vm/run.sh packs it with a static
# busybox and the kernel modules listed in /modules.order).  It loads the
# virtio and 9p modules, builds the guest's root on a tmpfs from the host's
# /usr and /etc and the checkout (read-only 9p shares) plus a writable share
# for results, and hands over to tests/vm/guest.sh.  Kernel parameters the
# kernel does not know arrive here as environment: cfvm_src, cfvm_build,
# cfvm_images.
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /newroot
mount -t proc proc /proc
mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do
    insmod "/$m" || echo "cfvm: insmod $m failed"
done
# The read-only shares are cached in the guest (cache=loose): nothing changes
# them while the VM runs, and uncached 9p under emulation made every exec a
# round of host requests (10 python3 starts took 70 s instead of 6 s).  The
# writable results share stays uncached, so the host reads results live.
share() { # tag dir [rw]
    mkdir -p "/newroot$2"
    mount -t 9p -o "trans=virtio,version=9p2000.L,msize=262144,${3:-ro,cache=loose}" "$1" "/newroot$2" ||
        { echo "cfvm: cannot mount share $1 at $2"; echo o >/proc/sysrq-trigger; sleep 10; }
}
mount -t tmpfs -o mode=755 cfvm-root /newroot
cd /newroot
mkdir -p proc sys dev tmp run root var/tmp
# /tmp and /run first: a checkout or build below them (a CI clone in /tmp)
# is mounted on top, never hidden by them.
mount -t tmpfs -o mode=1777 tmp /newroot/tmp
mount -t tmpfs -o mode=755 run /newroot/run
ln -s usr/bin bin
ln -s usr/sbin sbin
ln -s usr/lib lib
ln -s usr/lib64 lib64
share usr /usr
share etc /etc
share src "$cfvm_src"
[ -n "$cfvm_build" ] && share build "$cfvm_build"
# The container backend's images (deploy/images.sh), when the host has them.
[ -n "$cfvm_images" ] && share images "$cfvm_images"
share out /vm-out rw
umount /proc
exec switch_root /newroot /usr/bin/bash "$cfvm_src/tests/vm/guest.sh"
