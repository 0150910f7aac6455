// The network-isolated option (vnetEnabled): a virtual network for the Function App's outbound
// traffic, private endpoints for the storage services the app uses, and the private DNS zones
// that make the accounts' usual host names resolve to those endpoints inside the network.
//
//   app subnet        delegated to Microsoft.App/environments: Flex Consumption VNet integration
//   endpoints subnet  the storage accounts' private endpoints (infra/app/private-endpoints.bicep)
//
// The zones live in this resource group, which suits a self-contained deployment; in a
// hub-and-spoke network they belong to the hub, and these would be links to them instead.

@description('Name of the virtual network.')
param name string

@description('Azure region of the network.')
param location string

@description('Tags applied to the network and the zones.')
param tags object

@description('Address space of the network.')
param addressPrefix string = '10.60.0.0/16'

@description('Subnet the Function App integrates with (its outbound traffic).')
param appSubnetPrefix string = '10.60.1.0/24'

@description('Subnet of the private endpoints.')
param endpointSubnetPrefix string = '10.60.2.0/24'

var storageSuffix = environment().suffixes.storage
// The storage services the deployment reaches privately (the vault's blobs and tables, the
// staging queues, and the host's blobs, queues and tables).
var services = [
  'blob'
  'queue'
  'table'
]

resource vnet 'Microsoft.Network/virtualNetworks@2023-11-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    addressSpace: {
      addressPrefixes: [
        addressPrefix
      ]
    }
    subnets: [
      {
        name: 'app'
        properties: {
          addressPrefix: appSubnetPrefix
          delegations: [
            {
              name: 'flex-consumption'
              properties: {
                // The delegation Flex Consumption VNet integration uses.
                serviceName: 'Microsoft.App/environments'
              }
            }
          ]
        }
      }
      {
        name: 'private-endpoints'
        properties: {
          addressPrefix: endpointSubnetPrefix
          privateEndpointNetworkPolicies: 'Disabled'
        }
      }
    ]
  }
}

resource zones 'Microsoft.Network/privateDnsZones@2020-06-01' = [for service in services: {
  name: 'privatelink.${service}.${storageSuffix}'
  location: 'global'
  tags: tags
}]

resource links 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2020-06-01' = [for (service, i) in services: {
  parent: zones[i]
  name: '${name}-link'
  location: 'global'
  tags: tags
  properties: {
    registrationEnabled: false
    virtualNetwork: {
      id: vnet.id
    }
  }
}]

output appSubnetId string = vnet.properties.subnets[0].id
output endpointSubnetId string = vnet.properties.subnets[1].id
output dnsZoneIds object = {
  blob: zones[0].id
  queue: zones[1].id
  table: zones[2].id
}
